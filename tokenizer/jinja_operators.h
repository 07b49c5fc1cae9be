// Python's arithmetic operators on Jinja values (int overflow is an error instead of a bignum).
#pragma once
#include <string>

#include "tokenizer/jinja_value.h"

namespace tq::jinja {

Value add(const Value& left, const Value& right);              // +  (numbers, str, list, tuple)
Value subtract(const Value& left, const Value& right);         // -
Value multiply(const Value& left, const Value& right);         // *  (also str/list repetition)
Value true_divide(const Value& left, const Value& right);      // /  (always float)
Value floor_divide(const Value& left, const Value& right);     // //
Value modulo(const Value& left, const Value& right);           // %  (also printf-style str % args)
Value power(const Value& left, const Value& right);            // **
Value negate(const Value& operand);                            // unary -
Value unary_plus(const Value& operand);                        // unary +

// Python's printf-style `format % args`: args is a tuple of positional values, a dict for
// %(name)s keys, or a single value.
std::string percent_format(const std::string& format, const Value& args);

}  // namespace tq::jinja
