// test_check.cpp: the messages a student reads. PA_TODO names the exercise's function (the
// enclosing function when the stub is inside a lambda), and error_contains / contains_text
// print the wanted text and the actual message when they fail.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "compare.h"
#include "pa/check.h"

using pa::test::contains_text;
using pa::test::error_contains;

namespace pa::check_test {

// Stubs, in the places exercises put them.
int plain_stub(int) { PA_TODO("ch99"); }

int make_plan(const std::vector<int>& items, int parts) {
  auto cut_and_deal = [&](int n) -> int { PA_TODO("ch99"); };
  return cut_and_deal(int(items.size()) + parts);
}

int nested_lambdas() {
  auto outer = [] {
    auto inner = []() -> int { PA_TODO("ch99"); };
    return inner();
  };
  return outer();
}

template <typename T>
T templated(T x) {
  auto f = [](T) -> T { PA_TODO("ch99"); };
  return f(x);
}

struct Functor {
  int operator()(int) const { PA_TODO("ch99"); }  // a real operator(): named as such
};

struct Planner {
  int run() {
    auto step = [this]() -> int { PA_TODO("ch99"); };
    return step();
  }
};

}  // namespace pa::check_test

namespace {

std::string todo_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const pa::NotImplemented& e) {
    return e.what();
  }
  return "(no NotImplemented)";
}

TEST(PaTodo, NamesTheFunction) {
  const std::string msg = todo_message([] { pa::check_test::plain_stub(1); });
  EXPECT_TRUE(contains_text(msg, "TODO(ch99) not done yet: plain_stub() in "));
  EXPECT_TRUE(contains_text(msg, "test_check.cpp is your exercise"));
}

TEST(PaTodo, InALambdaNamesTheEnclosingFunction) {
  const std::string msg = todo_message([] { pa::check_test::make_plan({1, 2}, 3); });
  EXPECT_TRUE(contains_text(msg, "TODO(ch99) not done yet: the lambda in make_plan() in "));
  EXPECT_EQ(msg.find("operator()"), std::string::npos) << msg;
}

TEST(PaTodo, NestedLambdasNameTheOutermostFunction) {
  const std::string msg = todo_message([] { pa::check_test::nested_lambdas(); });
  EXPECT_TRUE(contains_text(msg, "the lambda in nested_lambdas() in "));
}

TEST(PaTodo, LambdaInATemplateAndInAMemberFunction) {
  EXPECT_TRUE(contains_text(todo_message([] { pa::check_test::templated(2.0); }),
                            "the lambda in templated() in "));
  EXPECT_TRUE(contains_text(todo_message([] { pa::check_test::Planner().run(); }),
                            "the lambda in run() in "));
}

TEST(PaTodo, ARealCallOperatorKeepsItsName) {
  const std::string msg = todo_message([] { pa::check_test::Functor()(1); });
  EXPECT_TRUE(contains_text(msg, "not done yet: operator()() in "));
}

// The parser on what each compiler writes, whichever compiler built this test.
TEST(PaTodo, StubSiteFromEachCompilersPrettyName) {
  using pa::detail::stub_site;
  auto name = [](const char* func, const char* pretty) {
    const auto site = stub_site(func, pretty);
    return site.function + (site.in_lambda ? " (lambda)" : "");
  };
  EXPECT_EQ(name("operator()", "pa::ch10::make_plan(const std::vector<int>&, int)::<lambda(int)>"),
            "make_plan (lambda)");
  EXPECT_EQ(name("operator()",
                 "pa::ch10::make_plan(const std::vector<int>&, int)::<lambda(int)>::<lambda()>"),
            "make_plan (lambda)");
  EXPECT_EQ(name("operator()",
                 "auto pa::ch10::make_plan(const std::vector<int> &, int)::(anonymous class)::"
                 "operator()(int) const"),
            "make_plan (lambda)");
  EXPECT_EQ(name("operator()", "auto f()::(lambda at plan.cpp:3:5)::operator()() const"),
            "f (lambda)");
  EXPECT_EQ(name("operator()", "pa::ch10::tmpl<double>(double)::<lambda(int)>"), "tmpl (lambda)");
  EXPECT_EQ(name("operator()", "pa::ch10::S::S()::<lambda()>"), "S (lambda)");
  EXPECT_EQ(name("operator()", "int pa::ch10::S::operator()(int)"), "operator()");
  EXPECT_EQ(name("allocate", "int pa::ch02::BlockAllocator::allocate()"), "allocate");
  EXPECT_EQ(name("operator()", nullptr), "operator()");
}

// The helpers' own messages: a failure prints the wanted text and the actual message.
TEST(ErrorContains, PassesOnAMatchingPaError) {
  EXPECT_TRUE(error_contains([] { throw pa::Error("out of blocks: needs 5 more blocks"); },
                             "needs 5 more blocks"));
}

TEST(ErrorContains, PrintsTheActualMessageOnAMismatch) {
  const auto r = error_contains([] { throw pa::Error("out of memory"); }, "needs 5 more blocks");
  EXPECT_FALSE(r);
  EXPECT_TRUE(contains_text(r.message(), "contains \"needs 5 more blocks\""));
  EXPECT_TRUE(contains_text(r.message(), "actual message: out of memory"));
}

TEST(ErrorContains, SaysWhenNothingWasThrown) {
  const auto r = error_contains([] {}, "unknown block 4");
  EXPECT_FALSE(r);
  EXPECT_TRUE(contains_text(r.message(), "actual message: (no error)"));
}

TEST(ErrorContains, SaysWhenTheErrorIsNotAPaError) {
  const auto r = error_contains([] { throw std::out_of_range("vector::at"); }, "unknown block 4");
  EXPECT_FALSE(r);
  EXPECT_TRUE(contains_text(r.message(), "not a pa::Error"));
  EXPECT_TRUE(contains_text(r.message(), "vector::at"));
}

TEST(ErrorContains, AnUnfinishedStubShowsItsTodoMessage) {
  const auto r = error_contains([] { pa::check_test::plain_stub(0); }, "unknown block 4");
  EXPECT_FALSE(r);
  EXPECT_TRUE(contains_text(r.message(), "actual message: TODO(ch99) not done yet: plain_stub()"));
}

TEST(ContainsText, PrintsBoth) {
  EXPECT_TRUE(contains_text("block 3 is free", "block 3"));
  const auto r = contains_text("block 3 is free", "block 4");
  EXPECT_FALSE(r);
  EXPECT_TRUE(contains_text(r.message(), "should contain \"block 4\""));
  EXPECT_TRUE(contains_text(r.message(), "actual message: block 3 is free"));
}

}  // namespace
