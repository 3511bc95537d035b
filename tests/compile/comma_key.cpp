// Compiled by a test (tests/CMakeLists.txt) with the puzzle code's flags: the Python-style pair key
// `activations[0, b]` must not compile (it would be the comma operator, reading activations[b]), and the
// right form `activations[{0, b}]` must.
#include "puzzles/store.h"
#include "puzzles/tensors.h"

namespace trainsim::puzzles {

void store_pair_key(Store<Activation>& activations, const Activation& a, int b) {
#ifdef RIGHT_FORM
  activations[{0, b}] = a;
#else
  activations[0, b] = a;
#endif
}

}  // namespace trainsim::puzzles
