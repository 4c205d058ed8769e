// Buffer: an aligned, growable, uninitialised allocation for hot-path workspaces; and an
// allocator for std::vectors that keep their contents but need not zero what they grow into.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace dspark {

template <class T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n) { resize(n); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(cap_, o.cap_);
    return *this;
  }
  ~Buffer() { std::free(data_); }

  // Grows capacity when needed (contents are not preserved on growth); never shrinks.
  void resize(size_t n) {
    if (n > cap_) {
      std::free(data_);
      size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
      data_ = static_cast<T*>(std::aligned_alloc(64, bytes));
      if (!data_) throw std::bad_alloc();
      cap_ = n;
    }
    size_ = n;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t cap_ = 0;
};

// Large allocation backed by anonymous memory with transparent huge pages requested.
// Pages are committed on first touch, so a large reservation costs nothing until used. Move-only;
// unmapped when it goes.
class HugeBuffer {
 public:
  HugeBuffer() = default;
  explicit HugeBuffer(size_t bytes);
  void* data() const { return mem_.get(); }
  size_t bytes() const { return mem_ ? mem_.get_deleter().bytes : 0; }

 private:
  struct Unmap {
    size_t bytes;  // no initializer, so that unique_ptr may default-construct it (zero)
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Unmap> mem_;
};

// std::vector<T, DefaultInitAllocator<T>>: resize() leaves new elements uninitialised (default-
// initialised) instead of zeroing them, for a buffer that is written right after it grows.
template <class T>
struct DefaultInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <class U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
};

}  // namespace dspark
