#include <doctest/doctest.h>
#include <vector>

#include "sim/idset.h"
#include "sim/tensor.h"

using namespace trainsim;

TEST_CASE("IdSet keeps sorted disjoint runs") {
  IdSet s{5, 1, 2, 3, 9, 4};
  CHECK(s.str() == "1-5,9");
  CHECK(s.size() == 6);
  CHECK(s.contains(4));
  CHECK_FALSE(s.contains(6));
  CHECK(s.spaced() == "1 2 3 4 5 9");
  CHECK((s & IdSet::range(4, 10)).str() == "4-5,9");
  CHECK((IdSet{0, 1} | IdSet{2}).str() == "0-2");
  CHECK(IdSet::range(0, 8).contains(IdSet{3, 7}));
  CHECK_FALSE(IdSet{0, 1}.intersects(IdSet{2, 3}));
  CHECK_THROWS_AS(IdSet{}.insert(-1), std::invalid_argument);
}

TEST_CASE("IdSet::contains(set) agrees with its definition, (a & b) == b, on many-run sets") {
  // Sets over ids 0..11 from the bits of k: every pair of 2^12 would be slow, so a stride through them.
  auto of_bits = [](unsigned k) {
    std::vector<int> ids;
    for (int i = 0; i < 12; ++i)
      if (k >> i & 1) ids.push_back(i);
    return IdSet::of(ids);
  };
  int checked = 0;
  for (unsigned x = 0; x < 4096; x += 7)
    for (unsigned y = 0; y < 4096; y += 13) {
      const IdSet a = of_bits(x), b = of_bits(y);
      CHECK(a.contains(b) == ((a & b) == b));
      CHECK(a.contains(b) == ((x & y) == y));
      ++checked;
    }
  CHECK(checked > 100000);
  CHECK(IdSet{0, 1, 5, 6}.contains(IdSet{5}));
  CHECK_FALSE(IdSet{0, 1, 5, 6}.contains(IdSet{1, 2}));
  CHECK(IdSet{}.contains(IdSet{}));
  CHECK_FALSE(IdSet{}.contains(IdSet{0}));
}

TEST_CASE("tensor names") {
  CHECK(weight_tensor(3, {0}, 4).str() == "W3[0/4]");
  CHECK(weight_tensor(1, {0}, 1, 1).str() == "W1@1");
  CHECK(activation_tensor(2, IdSet::range(0, 4)).str() == "A2{0-3}");
  CHECK(weight_grad_tensor(1, {2}, {1}, 4).str() == "dW1{2}[1/4]");
  CHECK(activation_grad_tensor(4, {1}).str() == "dA4{1}");
}

TEST_CASE("weight grads add over disjoint batches of the same shards") {
  Tensor a = weight_grad_tensor(0, {0, 1}), b = weight_grad_tensor(0, {2});
  CHECK(sum(a, b).batches.str() == "0-2");
  CHECK_THROWS_WITH_AS(sum(a, a), doctest::Contains("both hold batches {0-1}"), TensorError);
  CHECK_THROWS_WITH_AS(sum(a, weight_grad_tensor(1, {3})), doctest::Contains("different layers"), TensorError);
  CHECK_THROWS_WITH_AS(sum(a, weight_grad_tensor(0, {3}, {0}, 2)), doctest::Contains("different shards"), TensorError);
  CHECK_THROWS_WITH_AS(sum(weight_tensor(0), weight_tensor(0)), doctest::Contains("only weight grads"), TensorError);
}

TEST_CASE("shards combine, and only complete tensors shard") {
  Tensor w0 = weight_tensor(2, {0}, 2), w1 = weight_tensor(2, {1}, 2);
  Tensor full = combine(w0, w1);
  CHECK(full.complete());
  CHECK_FALSE(w0.complete());
  CHECK(shard(full, 1, 2) == w1);
  CHECK_THROWS_WITH_AS(shard(w0, 0, 2), doctest::Contains("needs the complete tensor"), TensorError);
  CHECK_THROWS_WITH_AS(shard(full, 2, 2), doctest::Contains("out of range"), TensorError);
  CHECK_THROWS_WITH_AS(combine(w0, weight_tensor(3, {1}, 2)), doctest::Contains("different tensors"), TensorError);
}

TEST_CASE("IdSet: copies, moves and assignments keep inline and heap-held sets apart") {
  const IdSet one = IdSet::range(2, 6);           // one run: held inline
  const IdSet many = IdSet{0, 1, 2, 5, 9, 10};    // three runs: held on the heap
  CHECK(one.runs().size() == 1);
  REQUIRE(many.runs().size() == 3);
  IdSet a = many, b = one;  // copies
  CHECK(a == many);
  CHECK(b == one);
  a = one;  // heap -> inline
  CHECK(a == one);
  b = many;  // inline -> heap
  CHECK(b == many);
  IdSet c = std::move(b);  // the heap block moves; the source is left empty
  CHECK(c == many);
  CHECK(b.empty());
  const IdSet& alias = c;
  c = alias;  // self-assignment keeps the set
  CHECK(c == many);
  IdSet d;
  d = std::move(c);
  CHECK(d == many);
  CHECK(d.str() == "0-2,5,9-10");
  CHECK((d | one).str() == "0-5,9-10");
  CHECK((d & one).str() == "2,5");
  CHECK((d - one).str() == "0-1,9-10");
  CHECK((many <=> one) == std::strong_ordering::less);  // by runs, as before: [0,3) < [2,6)
}
