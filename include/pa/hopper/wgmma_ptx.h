// The inline PTX behind pa/hopper/wgmma.h, GPU builds only (included from there). One
// specialisation of WgmmaPtx per N (8 to 256 in steps of 8): an instruction of shape m64nN
// names its N / 2 accumulator registers one by one, so each N has its own asm string. The
// tables below spell them out four at a time:
//   PA_WG_R<N>  "%0, %1, ..., %(N/2 - 1)"        the accumulators in the instruction
//   PA_WG_O<N>  "+f"(d[0]), ..., "+f"(d[N/2-1])  and as operands (read and written)
// and PA_WG_DEFINE(N, ...) gets the numbers of the operands that follow them (the
// descriptors or A's registers, scale-d, the transposes) as strings.
//
// scale-d is a predicate: 0 computes D = A * B, 1 D = A * B + D. imm-scale-a/-b are 1 (no
// negation); imm-trans-a/-b are 1 for an MN-major tile (fp16/bf16 only; fp8 has none).
#pragma once

#include <cstdint>

namespace pa::detail {

template <int N>
struct WgmmaPtx;

#define PA_WG_SCALE_(I) "{\n.reg .pred p;\nsetp.ne.b32 p, %" I ", 0;\n"
#define PA_WG_SS_(N, K, TYPES, I0, I1, I2, TRANS)                                               \
  asm volatile(PA_WG_SCALE_(I2) "wgmma.mma_async.sync.aligned.m64n" #N K ".f32." TYPES " {"    \
               PA_WG_R##N "}, %" I0 ", %" I1 ", p, 1, 1" TRANS ";\n}\n"                        \
               : PA_WG_O##N                                                                    \
               : "l"(a), "l"(b), "r"(scale), "n"(TA), "n"(TB)                                  \
               : "memory")
#define PA_WG_RS_(N, K, TYPES, I0, I1, I2, I3, I4, I5, TRANS)                                  \
  asm volatile(PA_WG_SCALE_(I5) "wgmma.mma_async.sync.aligned.m64n" #N K ".f32." TYPES " {"    \
               PA_WG_R##N "}, {%" I0 ", %" I1 ", %" I2 ", %" I3 "}, %" I4 ", p, 1, 1" TRANS    \
               ";\n}\n"                                                                        \
               : PA_WG_O##N                                                                    \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale), "n"(TB)       \
               : "memory")
// Operands after the accumulators. SS: a-desc I0, b-desc I1, scale-d I2, trans-a I3,
// trans-b I4. RS: a I0-I3, b-desc I4, scale-d I5, trans-b I6.
#define PA_WG_DEFINE(N, I0, I1, I2, I3, I4, I5, I6)                                             \
  template <>                                                                                  \
  struct WgmmaPtx<N> {                                                                         \
    template <int Type, int TA, int TB>                                                        \
    __device__ static void ss(float* d, uint64_t a, uint64_t b, int scale) {                   \
      if constexpr (Type == 0)                                                                 \
        PA_WG_SS_(N, "k16", "f16.f16", I0, I1, I2, ", %" I3 ", %" I4);                          \
      else if constexpr (Type == 1)                                                            \
        PA_WG_SS_(N, "k16", "bf16.bf16", I0, I1, I2, ", %" I3 ", %" I4);                        \
      else                                                                                     \
        PA_WG_SS_(N, "k32", "e4m3.e4m3", I0, I1, I2, "");                                      \
    }                                                                                          \
    template <int Type, int TB>                                                                \
    __device__ static void rs(float* d, const uint32_t* a, uint64_t b, int scale) {            \
      if constexpr (Type == 0)                                                                 \
        PA_WG_RS_(N, "k16", "f16.f16", I0, I1, I2, I3, I4, I5, ", %" I6);                       \
      else if constexpr (Type == 1)                                                            \
        PA_WG_RS_(N, "k16", "bf16.bf16", I0, I1, I2, I3, I4, I5, ", %" I6);                     \
      else                                                                                     \
        PA_WG_RS_(N, "k32", "e4m3.e4m3", I0, I1, I2, I3, I4, I5, "");                          \
    }                                                                                          \
  };

#define PA_WG_R8 "%0, %1, %2, %3"
#define PA_WG_O8 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
#define PA_WG_R16 PA_WG_R8 ", %4, %5, %6, %7"
#define PA_WG_O16 PA_WG_O8, "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define PA_WG_R24 PA_WG_R16 ", %8, %9, %10, %11"
#define PA_WG_O24 PA_WG_O16, "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
#define PA_WG_R32 PA_WG_R24 ", %12, %13, %14, %15"
#define PA_WG_O32 PA_WG_O24, "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define PA_WG_R40 PA_WG_R32 ", %16, %17, %18, %19"
#define PA_WG_O40 PA_WG_O32, "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19])
#define PA_WG_R48 PA_WG_R40 ", %20, %21, %22, %23"
#define PA_WG_O48 PA_WG_O40, "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
#define PA_WG_R56 PA_WG_R48 ", %24, %25, %26, %27"
#define PA_WG_O56 PA_WG_O48, "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27])
#define PA_WG_R64 PA_WG_R56 ", %28, %29, %30, %31"
#define PA_WG_O64 PA_WG_O56, "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define PA_WG_R72 PA_WG_R64 ", %32, %33, %34, %35"
#define PA_WG_O72 PA_WG_O64, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35])
#define PA_WG_R80 PA_WG_R72 ", %36, %37, %38, %39"
#define PA_WG_O80 PA_WG_O72, "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
#define PA_WG_R88 PA_WG_R80 ", %40, %41, %42, %43"
#define PA_WG_O88 PA_WG_O80, "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43])
#define PA_WG_R96 PA_WG_R88 ", %44, %45, %46, %47"
#define PA_WG_O96 PA_WG_O88, "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define PA_WG_R104 PA_WG_R96 ", %48, %49, %50, %51"
#define PA_WG_O104 PA_WG_O96, "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51])
#define PA_WG_R112 PA_WG_R104 ", %52, %53, %54, %55"
#define PA_WG_O112 PA_WG_O104, "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
#define PA_WG_R120 PA_WG_R112 ", %56, %57, %58, %59"
#define PA_WG_O120 PA_WG_O112, "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59])
#define PA_WG_R128 PA_WG_R120 ", %60, %61, %62, %63"
#define PA_WG_O128 PA_WG_O120, "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define PA_WG_R136 PA_WG_R128 ", %64, %65, %66, %67"
#define PA_WG_O136 PA_WG_O128, "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67])
#define PA_WG_R144 PA_WG_R136 ", %68, %69, %70, %71"
#define PA_WG_O144 PA_WG_O136, "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
#define PA_WG_R152 PA_WG_R144 ", %72, %73, %74, %75"
#define PA_WG_O152 PA_WG_O144, "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75])
#define PA_WG_R160 PA_WG_R152 ", %76, %77, %78, %79"
#define PA_WG_O160 PA_WG_O152, "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
#define PA_WG_R168 PA_WG_R160 ", %80, %81, %82, %83"
#define PA_WG_O168 PA_WG_O160, "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83])
#define PA_WG_R176 PA_WG_R168 ", %84, %85, %86, %87"
#define PA_WG_O176 PA_WG_O168, "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
#define PA_WG_R184 PA_WG_R176 ", %88, %89, %90, %91"
#define PA_WG_O184 PA_WG_O176, "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91])
#define PA_WG_R192 PA_WG_R184 ", %92, %93, %94, %95"
#define PA_WG_O192 PA_WG_O184, "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define PA_WG_R200 PA_WG_R192 ", %96, %97, %98, %99"
#define PA_WG_O200 PA_WG_O192, "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99])
#define PA_WG_R208 PA_WG_R200 ", %100, %101, %102, %103"
#define PA_WG_O208 PA_WG_O200, "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103])
#define PA_WG_R216 PA_WG_R208 ", %104, %105, %106, %107"
#define PA_WG_O216 PA_WG_O208, "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107])
#define PA_WG_R224 PA_WG_R216 ", %108, %109, %110, %111"
#define PA_WG_O224 PA_WG_O216, "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111])
#define PA_WG_R232 PA_WG_R224 ", %112, %113, %114, %115"
#define PA_WG_O232 PA_WG_O224, "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115])
#define PA_WG_R240 PA_WG_R232 ", %116, %117, %118, %119"
#define PA_WG_O240 PA_WG_O232, "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119])
#define PA_WG_R248 PA_WG_R240 ", %120, %121, %122, %123"
#define PA_WG_O248 PA_WG_O240, "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123])
#define PA_WG_R256 PA_WG_R248 ", %124, %125, %126, %127"
#define PA_WG_O256 PA_WG_O248, "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
PA_WG_DEFINE(8, "4", "5", "6", "7", "8", "9", "10")
PA_WG_DEFINE(16, "8", "9", "10", "11", "12", "13", "14")
PA_WG_DEFINE(24, "12", "13", "14", "15", "16", "17", "18")
PA_WG_DEFINE(32, "16", "17", "18", "19", "20", "21", "22")
PA_WG_DEFINE(40, "20", "21", "22", "23", "24", "25", "26")
PA_WG_DEFINE(48, "24", "25", "26", "27", "28", "29", "30")
PA_WG_DEFINE(56, "28", "29", "30", "31", "32", "33", "34")
PA_WG_DEFINE(64, "32", "33", "34", "35", "36", "37", "38")
PA_WG_DEFINE(72, "36", "37", "38", "39", "40", "41", "42")
PA_WG_DEFINE(80, "40", "41", "42", "43", "44", "45", "46")
PA_WG_DEFINE(88, "44", "45", "46", "47", "48", "49", "50")
PA_WG_DEFINE(96, "48", "49", "50", "51", "52", "53", "54")
PA_WG_DEFINE(104, "52", "53", "54", "55", "56", "57", "58")
PA_WG_DEFINE(112, "56", "57", "58", "59", "60", "61", "62")
PA_WG_DEFINE(120, "60", "61", "62", "63", "64", "65", "66")
PA_WG_DEFINE(128, "64", "65", "66", "67", "68", "69", "70")
PA_WG_DEFINE(136, "68", "69", "70", "71", "72", "73", "74")
PA_WG_DEFINE(144, "72", "73", "74", "75", "76", "77", "78")
PA_WG_DEFINE(152, "76", "77", "78", "79", "80", "81", "82")
PA_WG_DEFINE(160, "80", "81", "82", "83", "84", "85", "86")
PA_WG_DEFINE(168, "84", "85", "86", "87", "88", "89", "90")
PA_WG_DEFINE(176, "88", "89", "90", "91", "92", "93", "94")
PA_WG_DEFINE(184, "92", "93", "94", "95", "96", "97", "98")
PA_WG_DEFINE(192, "96", "97", "98", "99", "100", "101", "102")
PA_WG_DEFINE(200, "100", "101", "102", "103", "104", "105", "106")
PA_WG_DEFINE(208, "104", "105", "106", "107", "108", "109", "110")
PA_WG_DEFINE(216, "108", "109", "110", "111", "112", "113", "114")
PA_WG_DEFINE(224, "112", "113", "114", "115", "116", "117", "118")
PA_WG_DEFINE(232, "116", "117", "118", "119", "120", "121", "122")
PA_WG_DEFINE(240, "120", "121", "122", "123", "124", "125", "126")
PA_WG_DEFINE(248, "124", "125", "126", "127", "128", "129", "130")
PA_WG_DEFINE(256, "128", "129", "130", "131", "132", "133", "134")

#undef PA_WG_DEFINE
#undef PA_WG_RS_
#undef PA_WG_SS_
#undef PA_WG_SCALE_

}  // namespace pa::detail
