#pragma once
// A move-only `void()` callable stored inline: the event queue holds callbacks without a heap
// allocation per event. A lambda that captures more than kCallbackBytes does not compile.

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace trainsim::engine {

inline constexpr std::size_t kCallbackBytes = 32;

class Callback {
 public:
  Callback() = default;

  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Callback>>>
  Callback(F&& f) {  // NOLINT(google-explicit-constructor): lambdas convert implicitly
    using Fn = std::decay_t<F>;
    static_assert(sizeof(Fn) <= kCallbackBytes, "callback captures too much; capture an index");
    static_assert(alignof(Fn) <= alignof(std::max_align_t));
    static_assert(std::is_nothrow_move_constructible_v<Fn>);
    ::new (static_cast<void*>(storage_)) Fn(std::forward<F>(f));
    ops_ = &kOps<Fn>;
  }

  Callback(Callback&& o) noexcept : ops_(o.ops_) {
    if (ops_) {
      ops_->move(storage_, o.storage_);
      o.ops_ = nullptr;
    }
  }
  Callback& operator=(Callback&& o) noexcept {
    if (this != &o) {
      reset();
      ops_ = o.ops_;
      if (ops_) {
        ops_->move(storage_, o.storage_);
        o.ops_ = nullptr;
      }
    }
    return *this;
  }
  Callback(const Callback&) = delete;
  Callback& operator=(const Callback&) = delete;
  ~Callback() { reset(); }

  explicit operator bool() const { return ops_ != nullptr; }
  void operator()() { ops_->call(storage_); }

 private:
  struct Ops {
    void (*call)(void*);
    void (*move)(void* to, void* from);
    void (*destroy)(void*);
  };
  template <typename Fn>
  static constexpr Ops kOps = {
      [](void* p) { (*static_cast<Fn*>(p))(); },
      [](void* to, void* from) {
        ::new (to) Fn(std::move(*static_cast<Fn*>(from)));
        static_cast<Fn*>(from)->~Fn();
      },
      [](void* p) { static_cast<Fn*>(p)->~Fn(); },
  };

  void reset() {
    if (ops_) {
      ops_->destroy(storage_);
      ops_ = nullptr;
    }
  }

  alignas(std::max_align_t) unsigned char storage_[kCallbackBytes];
  const Ops* ops_ = nullptr;
};

}  // namespace trainsim::engine
