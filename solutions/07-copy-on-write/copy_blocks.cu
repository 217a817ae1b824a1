// Chapter 7, exercise 5 of 5: copy blocks of every layer in one launch.
#include "pa/ch07_cow.h"
#include "pa/dtype.h"
#include "pa/launch.h"

namespace pa::ch07 {

// ANCHOR: copy_kernel
// Grid (copy, layer). A block of a pool is one contiguous run of block_elems elements
// (Hkv * D * block_size, in both layouts), so a copy is a straight 16-byte memcpy.
template <typename T>
__global__ void copy_blocks_kernel(T* const* k_pools, T* const* v_pools, const int2* copies,
                                   int64_t block_elems) {
  const int2 c = copies[blockIdx.x];
  T* k = k_pools[blockIdx.y];
  T* v = v_pools[blockIdx.y];
  const int64_t vecs = block_elems * int64_t(sizeof(T)) / 16;
  // TODO(ch07): for this (copy, layer) thread block: block c.y of k and of v becomes equal to
  //   block c.x (block_elems elements each), and nothing else changes. block_elems *
  //   sizeof(T) is a multiple of 16, so the copy is `vecs` uint4 vectors. Offsets are 64-bit.
  // HINT(1): A block is one contiguous run of each pool, starting at element id *
  //   block_elems: this is a memcpy of vecs 16-byte vectors, shared among the block's
  //   threads.
  // HINT(2): copy block c.x to block c.y in k and in v, as uint4 vectors (vecs of them
  //   per block), the block's threads striding over them. Offsets in 64 bits.
  // BEGIN SOLUTION
  const uint4* k_src = reinterpret_cast<const uint4*>(k + int64_t(c.x) * block_elems);
  const uint4* v_src = reinterpret_cast<const uint4*>(v + int64_t(c.x) * block_elems);
  uint4* k_dst = reinterpret_cast<uint4*>(k + int64_t(c.y) * block_elems);
  uint4* v_dst = reinterpret_cast<uint4*>(v + int64_t(c.y) * block_elems);
  for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
    k_dst[i] = k_src[i];
    v_dst[i] = v_src[i];
  }
  // END SOLUTION
}
// ANCHOR_END: copy_kernel

template <typename T>
void copy_blocks(const std::vector<T*>& k_pools, const std::vector<T*>& v_pools,
                 const ch02::PoolShape& s, const std::vector<BlockCopy>& copies,
                 cudaStream_t stream) {
  ch02::check_pool_shape(s, ch02::pack_x<T>());
  PA_REQUIRE(!k_pools.empty() && k_pools.size() == v_pools.size(),
             "copy_blocks: " << k_pools.size() << " K pools and " << v_pools.size() << " V pools");
  PA_REQUIRE(k_pools.size() <= 65535, "copy_blocks: too many layers");
  if (copies.empty()) return;
  std::vector<int> flat;
  std::vector<char> role(size_t(s.num_blocks), 0);  // 1: a source, 2: a destination
  for (const BlockCopy& c : copies) {
    PA_REQUIRE(c.src >= 0 && c.src < s.num_blocks && c.dst >= 0 && c.dst < s.num_blocks,
               "copy_blocks: copy " << c.src << " -> " << c.dst << " is outside the pool of "
                                    << s.num_blocks << " blocks");
    PA_REQUIRE(c.src != c.dst, "copy_blocks: block " << c.src << " copied onto itself");
    PA_REQUIRE(role[size_t(c.dst)] == 0,
               "copy_blocks: block " << c.dst << " is written by one copy and read or written by"
                                     << " another in the same launch (the copies run in parallel)");
    PA_REQUIRE(role[size_t(c.src)] != 2,
               "copy_blocks: block " << c.src << " is read by one copy and written by another"
                                     << " in the same launch (the copies run in parallel)");
    role[size_t(c.src)] = 1;
    role[size_t(c.dst)] = 2;
    flat.push_back(c.src);
    flat.push_back(c.dst);
  }
  DeviceBuffer<T*> ks(k_pools), vs(v_pools);
  DeviceBuffer<int> pairs(flat);
  const int64_t block_elems = int64_t(s.num_kv_heads) * s.head_size * s.block_size;
  launch(copy_blocks_kernel<T>, dim3(unsigned(copies.size()), unsigned(k_pools.size())), dim3(256),
         0, stream, static_cast<T* const*>(ks.get()), static_cast<T* const*>(vs.get()),
         reinterpret_cast<const int2*>(pairs.get()), block_elems);
  PA_CUDA_CHECK(cudaStreamSynchronize(stream));  // the pointer and pair arrays die with us
}

template void copy_blocks<float>(const std::vector<float*>&, const std::vector<float*>&,
                                 const ch02::PoolShape&, const std::vector<BlockCopy>&, cudaStream_t);
template void copy_blocks<half>(const std::vector<half*>&, const std::vector<half*>&,
                                const ch02::PoolShape&, const std::vector<BlockCopy>&, cudaStream_t);
template void copy_blocks<bf16>(const std::vector<bf16*>&, const std::vector<bf16*>&,
                                const ch02::PoolShape&, const std::vector<BlockCopy>&, cudaStream_t);

}  // namespace pa::ch07
