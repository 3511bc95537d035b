// Named fields of a hardware description (model, device, network), so that every number can be read from a
// JSON file, overridden by `key=value` text (flags and the `.sched` header), and printed back canonically.
//
// A field is a name ("hidden", "efficiency.forward") bound to a member of the struct it describes. JSON
// objects nest by the dots of the name ({"efficiency": {"forward": 0.5}}). Numbers print in their shortest
// round-trip form ({fmt}'s default), so reading what was printed gives the same value and printing is
// deterministic.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace trainsim::hw {

/// A bad hardware description: what() names the file (or flag, or header line) and the field.
struct SpecError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// What a field holds.
enum class FieldType { Int, Number, Bool, Text };

/// One field of a description struct T.
template <class T>
struct Field {
  std::string name;  ///< "hidden", "efficiency.forward"
  FieldType type;
  std::function<double(const T&)> get;            ///< Int, Number, Bool (0/1)
  std::function<void(T&, double)> set;
  std::function<std::string(const T&)> get_text;  ///< Text
  std::function<void(T&, const std::string&)> set_text;
};

/// Field bound to an int, double, bool or std::string member.
template <class T>
Field<T> field(std::string name, int T::*m) {
  return {std::move(name), FieldType::Int, [m](const T& t) { return double(t.*m); },
          [m](T& t, double v) { t.*m = static_cast<int>(v); }, {}, {}};
}
template <class T>
Field<T> field(std::string name, long long T::*m) {
  return {std::move(name), FieldType::Int, [m](const T& t) { return double(t.*m); },
          [m](T& t, double v) { t.*m = static_cast<long long>(v); }, {}, {}};
}
template <class T>
Field<T> field(std::string name, double T::*m) {
  return {std::move(name), FieldType::Number, [m](const T& t) { return t.*m; }, [m](T& t, double v) { t.*m = v; }, {}, {}};
}
template <class T>
Field<T> field(std::string name, bool T::*m) {
  return {std::move(name), FieldType::Bool, [m](const T& t) { return t.*m ? 1.0 : 0.0; },
          [m](T& t, double v) { t.*m = v != 0; }, {}, {}};
}
template <class T>
Field<T> field(std::string name, std::string T::*m) {
  return {std::move(name), FieldType::Text, {}, {}, [m](const T& t) { return t.*m; },
          [m](T& t, const std::string& v) { t.*m = v; }};
}

/// A field's value as text: integers without a point, numbers in shortest round-trip form, true/false.
template <class T>
std::string field_text(const Field<T>& f, const T& v) {
  switch (f.type) {
    case FieldType::Text: return f.get_text(v);
    case FieldType::Bool: return f.get(v) != 0 ? "true" : "false";
    case FieldType::Int: return fmt::format("{}", static_cast<long long>(f.get(v)));
    case FieldType::Number: return fmt::format("{}", f.get(v));
  }
  return {};
}

/// Sets a field from text. Throws SpecError "<where>: field '<name>': expected ..., got '...'".
template <class T>
void set_field_text(const Field<T>& f, T& v, const std::string& text, const std::string& where) {
  auto bad = [&](const char* expected) {
    return SpecError(fmt::format("{}: field '{}': expected {}, got '{}'", where, f.name, expected, text));
  };
  switch (f.type) {
    case FieldType::Text:
      if (text.empty() || text.find_first_of(" \t=#") != std::string::npos) throw bad("a name without spaces, '=' or '#'");
      try {
        f.set_text(v, text);
      } catch (const SpecError& e) {  // a structured value (a kernel table) that does not parse
        throw SpecError(fmt::format("{}: field '{}': {}", where, f.name, e.what()));
      }
      return;
    case FieldType::Bool:
      if (text == "true") f.set(v, 1);
      else if (text == "false") f.set(v, 0);
      else throw bad("true or false");
      return;
    case FieldType::Int:
    case FieldType::Number: {
      char* end = nullptr;
      errno = 0;
      double d = std::strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size() || errno != 0 || !std::isfinite(d))
        throw bad(f.type == FieldType::Int ? "an integer" : "a number");
      if (f.type == FieldType::Int && (d != std::floor(d) || std::fabs(d) > 2e9)) throw bad("an integer");
      f.set(v, d);
      return;
    }
  }
}

/// The fields' names, "a, b, c", for error messages.
template <class T>
std::string field_names(const std::vector<Field<T>>& fields) {
  std::string s;
  for (const auto& f : fields) s += (s.empty() ? "" : ", ") + f.name;
  return s;
}

/// Applies `key=value` to v. Throws SpecError naming `where` for an unknown key or a bad value.
template <class T>
void apply_override(const std::vector<Field<T>>& fields, T& v, const std::string& key, const std::string& value,
                    const std::string& where) {
  for (const auto& f : fields)
    if (f.name == key) return set_field_text(f, v, value, where);
  throw SpecError(fmt::format("{}: unknown field '{}' (the fields are: {})", where, key, field_names(fields)));
}

/// Applies every member of a JSON object (nested objects by dotted names) to v. Throws SpecError naming
/// `where` and the field for unknown fields and mistyped values. Keys in `skip` (top level) are ignored.
template <class T>
void apply_json(const std::vector<Field<T>>& fields, T& v, const nlohmann::json& j, const std::string& where,
                const std::vector<std::string>& skip = {}, const std::string& prefix = "") {
  if (!j.is_object()) throw SpecError(fmt::format("{}: expected a JSON object{}", where, prefix.empty() ? "" : " for '" + prefix + "'"));
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string name = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (prefix.empty() && std::find(skip.begin(), skip.end(), name) != skip.end()) continue;
    if (it->is_object()) {
      apply_json(fields, v, *it, where, skip, name);
      continue;
    }
    const Field<T>* f = nullptr;
    for (const auto& c : fields)
      if (c.name == name) f = &c;
    if (!f) throw SpecError(fmt::format("{}: unknown field '{}' (the fields are: {})", where, name, field_names(fields)));
    auto bad = [&](const char* expected) {
      return SpecError(fmt::format("{}: field '{}': expected {}, got {}", where, name, expected, it->dump()));
    };
    switch (f->type) {
      case FieldType::Text:
        if (!it->is_string()) throw bad("a string");
        set_field_text(*f, v, it->get<std::string>(), where);
        break;
      case FieldType::Bool:
        if (!it->is_boolean()) throw bad("true or false");
        f->set(v, it->get<bool>() ? 1 : 0);
        break;
      case FieldType::Int:
        if (!it->is_number_integer() && !(it->is_number_float() && std::floor(it->get<double>()) == it->get<double>()))
          throw bad("an integer");
        if (std::fabs(it->get<double>()) > 2e9) throw bad("an integer below 2e9");
        f->set(v, it->get<double>());
        break;
      case FieldType::Number:
        if (!it->is_number()) throw bad("a number");
        f->set(v, it->get<double>());
        break;
    }
  }
}

/// v as a JSON object (nested by dotted names), every field.
template <class T>
nlohmann::ordered_json fields_json(const std::vector<Field<T>>& fields, const T& v) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& f : fields) {
    nlohmann::ordered_json* at = &j;
    std::string name = f.name;
    for (auto dot = name.find('.'); dot != std::string::npos; dot = name.find('.')) {
      at = &(*at)[name.substr(0, dot)];
      name = name.substr(dot + 1);
    }
    switch (f.type) {
      case FieldType::Text: (*at)[name] = f.get_text(v); break;
      case FieldType::Bool: (*at)[name] = f.get(v) != 0; break;
      case FieldType::Int: (*at)[name] = static_cast<long long>(f.get(v)); break;
      case FieldType::Number: (*at)[name] = f.get(v); break;
    }
  }
  return j;
}

/// " key=value" for every field whose value differs from `base`, in field order (canonical).
template <class T>
std::string overrides_text(const std::vector<Field<T>>& fields, const T& v, const T& base) {
  std::string s;
  for (const auto& f : fields) {
    std::string a = field_text(f, v), b = field_text(f, base);
    if (a != b) s += " " + f.name + "=" + a;
  }
  return s;
}

}  // namespace trainsim::hw
