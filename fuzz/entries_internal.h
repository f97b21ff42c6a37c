// PRIVATE to fuzz/: what the entry files share.
#ifndef FLOWSTATE_FUZZ_ENTRIES_INTERNAL_H_
#define FLOWSTATE_FUZZ_ENTRIES_INTERNAL_H_

#include <string>

#include "graph/attr_value.h"
#include "graph/tensor.h"

namespace flowstate::fuzz {

// Prints "fuzz entry <entry>: <why>" and aborts: a finding.
[[noreturn]] void Fail(const char* entry, const std::string& why);

// Fails unless a decoded tensor is whole: a known dtype, a byte size that
// is its element count times the dtype's size without overflow, and a
// buffer that holds them (its first and last byte are read, so ASan sees a
// short one).
void CheckTensor(const Tensor& t, const char* entry);
// CheckTensor for every tensor attr of a graph.
void CheckGraphTensors(const GraphDef& g, const char* entry);

}  // namespace flowstate::fuzz

#endif  // FLOWSTATE_FUZZ_ENTRIES_INTERNAL_H_
