// environment.h — the binding's own OPENREG_* switches, validated.
//
// Each switch has a fixed set of values; anything else is an error naming the
// variable, the value and the accepted values (a misspelt switch must not
// silently mean its default).
#pragma once

#include <initializer_list>
#include <string>

namespace torch_openreg {

// The value of environment variable `name`, or `fallback` when it is unset or
// empty; raises if it is none of `accepted` (the first few words of `help`
// explain each value in the error).
std::string environmentChoice(const char* name, std::initializer_list<const char*> accepted,
                              const char* fallback, const char* help);

}  // namespace torch_openreg
