// PRIVATE to fuzz/: what the entry files share.
#ifndef FLOWSTATE_FUZZ_ENTRIES_INTERNAL_H_
#define FLOWSTATE_FUZZ_ENTRIES_INTERNAL_H_

#include <string>

namespace flowstate::fuzz {

// Prints "fuzz entry <entry>: <why>" and aborts: a finding.
[[noreturn]] void Fail(const char* entry, const std::string& why);

}  // namespace flowstate::fuzz

#endif  // FLOWSTATE_FUZZ_ENTRIES_INTERNAL_H_
