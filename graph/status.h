// Status and StatusOr<T>: how every Flowstate module reports errors.
//
// A Status is either OK or carries a code, a message and, where the error is
// about one node of a graph, that node's name (so REST errors can name it).
// Statuses are cheap to copy when OK (no allocation). StatusOr<T> holds either
// a value or a non-OK Status. Neither is thread-safe to mutate; distinct
// objects may be used from distinct threads.
//
//   Status s = graph.Validate();
//   if (!s.ok()) return s;
//   FS_RETURN_IF_ERROR(Foo());
//   FS_ASSIGN_OR_RETURN(Tensor t, MakeTensor(...));
#ifndef FLOWSTATE_GRAPH_STATUS_H_
#define FLOWSTATE_GRAPH_STATUS_H_

#include <cassert>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace flowstate {

// The codes follow gRPC's (and TensorFlow's) canonical error space, so the
// service can map them one to one onto HTTP and gRPC statuses.
enum class Code : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// "INVALID_ARGUMENT" etc.
std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message, std::string node = "");

  static Status OK() { return Status(); }

  bool ok() const { return rep_ == nullptr; }
  Code code() const { return rep_ ? rep_->code : Code::kOk; }
  const std::string& message() const;
  // The graph node the error is about, or empty.
  const std::string& node() const;

  // Returns a copy with `node` set if this status names no node yet.
  Status WithNode(std::string_view node) const;
  // Returns a copy whose message is "<prefix>: <message>".
  Status WithPrefix(std::string_view prefix) const;

  // "INVALID_ARGUMENT: message" (and " [node: n]" when a node is set).
  std::string ToString() const;

  // Aborts the process if not OK. For tests, tools and programmer errors.
  void CheckOk() const;

  bool operator==(const Status& other) const;

 private:
  struct Rep {
    Code code;
    std::string message;
    std::string node;
  };
  std::shared_ptr<const Rep> rep_;
};

Status InvalidArgument(std::string message, std::string node = "");
Status NotFound(std::string message, std::string node = "");
Status AlreadyExists(std::string message, std::string node = "");
Status FailedPrecondition(std::string message, std::string node = "");
Status ResourceExhausted(std::string message, std::string node = "");
Status OutOfRange(std::string message, std::string node = "");
Status Unimplemented(std::string message, std::string node = "");
Status Internal(std::string message, std::string node = "");
Status Cancelled(std::string message, std::string node = "");
Status Aborted(std::string message, std::string node = "");
Status Unavailable(std::string message, std::string node = "");
Status DataLoss(std::string message, std::string node = "");
Status PermissionDenied(std::string message, std::string node = "");
Status Unauthenticated(std::string message, std::string node = "");
Status DeadlineExceeded(std::string message, std::string node = "");

// A value of type T or the error that prevented computing it.
// REQUIRES: the Status given to the error constructor is not OK.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : v_(status) { assert(!status.ok()); }
  StatusOr(Status&& status) : v_(std::move(status)) {
    assert(!std::get<Status>(v_).ok());
  }
  StatusOr(const T& value) : v_(value) {}
  StatusOr(T&& value) : v_(std::move(value)) {}
  template <typename U,
            typename = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                        !std::is_same_v<std::decay_t<U>, T> &&
                                        !std::is_same_v<std::decay_t<U>, Status>>>
  StatusOr(U&& value) : v_(T(std::forward<U>(value))) {}

  bool ok() const { return v_.index() == 1; }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  // REQUIRES: ok().
  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

namespace internal {
inline Status AsStatus(const Status& s) { return s; }
template <typename T>
Status AsStatus(const StatusOr<T>& s) { return s.status(); }
}  // namespace internal

}  // namespace flowstate

#define FS_CONCAT_INNER_(a, b) a##b
#define FS_CONCAT_(a, b) FS_CONCAT_INNER_(a, b)

#define FS_RETURN_IF_ERROR(expr)                                    \
  do {                                                              \
    ::flowstate::Status _fs_status = ::flowstate::internal::AsStatus(expr); \
    if (!_fs_status.ok()) return _fs_status;                        \
  } while (0)

#define FS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#define FS_ASSIGN_OR_RETURN(lhs, expr) \
  FS_ASSIGN_OR_RETURN_IMPL_(FS_CONCAT_(_fs_statusor_, __LINE__), lhs, expr)

#endif  // FLOWSTATE_GRAPH_STATUS_H_
