// agents/calculator.cpp: the Calculate tool, generate_data.calc to the character:
//   parts = expr.split()
//   if len(parts) != 3 or parts[1] not in "+-*" or not all(p.lstrip("-").isdigit() for p in parts[::2]):
//       return "Error: cannot calculate."
//   a, op, b = int(parts[0]), parts[1], int(parts[2])
//   return str(a + b if op == "+" else a - b if op == "-" else a * b)
// Python's ints have no overflow, so the arithmetic is on decimal digits of any length, up
// to Python's limit of 4300 digits for int() and str().
#include <algorithm>
#include <vector>

#include "lorakv/agents/builtin_tools.h"
#include "lorakv/agents/python_text.h"

namespace lorakv::agents {
namespace {

constexpr size_t kMaxStrDigits = 4300;  // sys.int_info.default_max_str_digits

// An integer: sign and magnitude, the magnitude's decimal digits least significant first,
// without leading zeros (zero is no digits and never negative).
struct Integer {
  bool negative = false;
  std::vector<int> digits;
};

void trim(Integer& x) {
  while (!x.digits.empty() && x.digits.back() == 0) x.digits.pop_back();
  if (x.digits.empty()) x.negative = false;
}

int compare_magnitudes(const std::vector<int>& a, const std::vector<int>& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  for (size_t i = a.size(); i-- > 0;) {
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  }
  return 0;
}

std::vector<int> add_magnitudes(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> sum;
  int carry = 0;
  for (size_t i = 0; i < std::max(a.size(), b.size()) || carry != 0; ++i) {
    const int d = carry + (i < a.size() ? a[i] : 0) + (i < b.size() ? b[i] : 0);
    sum.push_back(d % 10);
    carry = d / 10;
  }
  return sum;
}

// a - b for |a| >= |b|.
std::vector<int> subtract_magnitudes(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> difference;
  int borrow = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    int d = a[i] - borrow - (i < b.size() ? b[i] : 0);
    borrow = d < 0 ? 1 : 0;
    difference.push_back(d + 10 * borrow);
  }
  return difference;
}

Integer add(const Integer& a, const Integer& b) {
  Integer out;
  if (a.negative == b.negative) {
    out = {a.negative, add_magnitudes(a.digits, b.digits)};
  } else if (compare_magnitudes(a.digits, b.digits) >= 0) {
    out = {a.negative, subtract_magnitudes(a.digits, b.digits)};
  } else {
    out = {b.negative, subtract_magnitudes(b.digits, a.digits)};
  }
  trim(out);
  return out;
}

Integer negate(Integer x) {
  x.negative = !x.negative;
  trim(x);
  return x;
}

Integer multiply(const Integer& a, const Integer& b) {
  std::vector<long long> columns(a.digits.size() + b.digits.size() + 1, 0);
  for (size_t i = 0; i < a.digits.size(); ++i) {
    for (size_t j = 0; j < b.digits.size(); ++j) columns[i + j] += a.digits[i] * b.digits[j];
  }
  Integer out{a.negative != b.negative, {}};
  long long carry = 0;
  for (long long column : columns) {
    carry += column;
    out.digits.push_back(static_cast<int>(carry % 10));
    carry /= 10;
  }
  trim(out);
  return out;
}

// Python's repr of the operand in int()'s message, cut at 200 characters ("%.200R"). An
// operand here is dashes and digits: nothing repr escapes.
std::string message_repr(const std::string& operand) {
  return python::first_chars("'" + operand + "'", 200);
}

// int(text) for an operand that passed calc's check: one optional '-', then decimal digits
// of any script. As CPython, the digit run's length is checked before what follows it.
Integer parse_integer(const std::string& text) {
  const std::vector<python::CodePoint> cps = python::code_points(text);
  Integer out;
  size_t i = 0;
  if (i < cps.size() && cps[i].value == U'-') out.negative = true, ++i;
  for (; i < cps.size() && python::decimal_value(cps[i].value) >= 0; ++i) {
    out.digits.push_back(python::decimal_value(cps[i].value));
  }
  const size_t count = out.digits.size();
  if (count > kMaxStrDigits) {
    throw CalculationError("Exceeds the limit (4300 digits) for integer string conversion: value has " +
                           std::to_string(count) + " digits; use sys.set_int_max_str_digits() to increase the limit");
  }
  if (count == 0 || i != cps.size()) {
    throw CalculationError("invalid literal for int() with base 10: " + message_repr(text));
  }
  std::reverse(out.digits.begin(), out.digits.end());
  trim(out);
  return out;
}

std::string to_string(const Integer& x) {
  if (x.digits.size() > kMaxStrDigits) {
    throw CalculationError(
        "Exceeds the limit (4300 digits) for integer string conversion; use sys.set_int_max_str_digits() to "
        "increase the limit");
  }
  if (x.digits.empty()) return "0";
  std::string out = x.negative ? "-" : "";
  for (size_t i = x.digits.size(); i-- > 0;) out.push_back(static_cast<char>('0' + x.digits[i]));
  return out;
}

// p.lstrip("-").isdigit()
bool looks_like_integer(const std::string& part) {
  const size_t first = part.find_first_not_of('-');
  return first != std::string::npos && python::is_digits(std::string_view(part).substr(first));
}

// parts[1] in "+-*": a substring, so "+-", "-*" and "+-*" pass (and multiply).
bool is_operator(const std::string& part) {
  return !part.empty() && std::string("+-*").find(part) != std::string::npos;
}

}  // namespace

std::string calculate(const std::string& expression) {
  const std::vector<std::string> parts = python::split(expression);
  if (parts.size() != 3 || !is_operator(parts[1]) || !looks_like_integer(parts[0]) || !looks_like_integer(parts[2])) {
    return kCannotCalculate;
  }
  const Integer a = parse_integer(parts[0]);
  const Integer b = parse_integer(parts[2]);
  if (parts[1] == "+") return to_string(add(a, b));
  if (parts[1] == "-") return to_string(add(a, negate(b)));
  return to_string(multiply(a, b));
}

}  // namespace lorakv::agents
