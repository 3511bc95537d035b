// A puzzle store: one of the five dictionaries a rank keeps its tensors in (weights, opt_states,
// activations, grad_activations, grad_weights), keyed by a layer or a (layer, tag) pair as in the puzzles.
// Everything held in a store counts towards the rank's memory; erase() is the puzzles' `del`.
#pragma once

#include <compare>
#include <utility>
#include <functional>
#include <map>
#include <optional>
#include <source_location>
#include <string>

#include <fmt/format.h>

#include "sim/errors.h"
#include "sim/tensor.h"

namespace trainsim::puzzles {

/// Store key: `l` or `{l, tag}` (the puzzles' `weights[l]`, `activations[l, mb]` written
/// `activations[{l, mb}]`: `activations[l, mb]` would be C++'s comma operator, and is a compile error in
/// puzzle code). A key remembers the line of the learner's code that wrote it, for error messages; keys
/// compare by layer and tag only.
struct Key {
  int layer = 0;
  int tag = -1;
  std::source_location where;  ///< where the key was written (the store access)
  // NOLINTNEXTLINE(google-explicit-constructor): reads like the puzzles' keys
  Key(int l, std::source_location w = std::source_location::current()) : layer(l), where(w) {}
  Key(int l, int t, std::source_location w = std::source_location::current()) : layer(l), tag(t), where(w) {}
  /// "1" or "{1, 0}", as the key is written in C++.
  std::string str() const { return tag < 0 ? fmt::format("{}", layer) : fmt::format("{{{}, {}}}", layer, tag); }
  /// "puzzles/exercises/ddp.cpp:31".
  std::string at() const { return fmt::format("{}:{}", where.file_name(), where.line()); }
  friend auto operator<=>(const Key& a, const Key& b) { return std::pair(a.layer, a.tag) <=> std::pair(b.layer, b.tag); }
  friend bool operator==(const Key& a, const Key& b) { return a.layer == b.layer && a.tag == b.tag; }
};

/// Called on every change of a store: (old value or null, new value or null).
using StoreHook = std::function<void(const Tensor* before, const Tensor* after)>;

/// A dictionary of tensors of type T whose contents count as the rank's memory.
template <typename T>
class Store {
 public:
  /// One entry. Assigning to it replaces the tensor it holds; reading an empty one throws SimError.
  class Slot {
   public:
    Slot(Store* store, Key key) : store_(store), key_(key) {}
    Slot(const Slot&) = delete;
    /// Stores a copy of another entry's tensor (counts twice, as in the puzzles).
    Slot& operator=(const Slot& other) { return *this = other.get(); }
    /// Stores `v`, dropping what the entry held.
    Slot& operator=(const T& v) {
      T incoming = v;  // v may alias value_
      std::optional<T> old = std::move(value_);
      value_ = std::move(incoming);
      store_->hook_(old ? &*old : nullptr, &*value_);
      return *this;
    }
    /// The tensor held. Throws SimError naming the rank, the read, the line of the learner's code that reads
    /// it and what to do, when the entry is empty.
    const T& get() const {
      if (!value_)
        throw SimError(fmt::format("rank {}: read {}[{}] at {}: it is empty: it was never set on this rank, or was "
                                   "deleted; store a tensor there first ({}[{}] = ...), or read the key that holds it",
                                   store_->rank_, store_->name_, key_.str(), key_.at(), store_->name_, key_.str()));
      return *value_;
    }
    operator const T&() const { return get(); }  // NOLINT(google-explicit-constructor)
    const T* operator->() const { return &get(); }
    bool has_value() const { return value_.has_value(); }

   private:
    friend class Store;
    Store* store_;
    Key key_;
    std::optional<T> value_;
  };

  Store(std::string name, int rank, StoreHook hook) : name_(std::move(name)), rank_(rank), hook_(std::move(hook)) {}
  Store(const Store&) = delete;

  /// The entry at `k`, created empty if missing (an empty entry holds no memory). The entry remembers where
  /// `k` was written, for the error of reading it empty.
  Slot& operator[](Key k) {
    auto it = slots_.find(k);
    if (it == slots_.end()) it = slots_.try_emplace(k, this, k).first;
    it->second.key_ = k;
    return it->second;
  }
  /// The puzzles' `del store[k]`. Throws SimError naming the rank, the line of `k` and what to do when nothing
  /// is held at `k`.
  void erase(Key k) {
    auto it = slots_.find(k);
    if (it == slots_.end() || !it->second.value_)
      throw SimError(fmt::format("rank {}: del {}[{}] at {}: nothing is stored there: it was never set on this rank, "
                                 "or was deleted already; delete each entry once, after its last use",
                                 rank_, name_, k.str(), k.at()));
    T old = std::move(*it->second.value_);
    slots_.erase(it);
    hook_(&old, nullptr);
  }
  /// True when an entry at `k` holds a tensor.
  bool contains(Key k) const {
    auto it = slots_.find(k);
    return it != slots_.end() && it->second.value_.has_value();
  }
  /// Number of entries holding a tensor.
  std::size_t size() const {
    std::size_t n = 0;
    for (const auto& [k, s] : slots_) n += s.value_.has_value();
    return n;
  }
  bool empty() const { return size() == 0; }
  const std::string& name() const { return name_; }
  /// Calls f(key, tensor) for each held entry in key order.
  template <typename F>
  void for_each(F&& f) const {
    for (const auto& [k, s] : slots_)
      if (s.value_) f(k, *s.value_);
  }

 private:
  std::string name_;
  int rank_;
  StoreHook hook_;
  std::map<Key, Slot> slots_;
};

}  // namespace trainsim::puzzles
