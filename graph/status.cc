#include "graph/status.h"

#include <cstdio>
#include <cstdlib>

namespace flowstate {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kCancelled: return "CANCELLED";
    case Code::kUnknown: return "UNKNOWN";
    case Code::kInvalidArgument: return "INVALID_ARGUMENT";
    case Code::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case Code::kNotFound: return "NOT_FOUND";
    case Code::kAlreadyExists: return "ALREADY_EXISTS";
    case Code::kPermissionDenied: return "PERMISSION_DENIED";
    case Code::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case Code::kFailedPrecondition: return "FAILED_PRECONDITION";
    case Code::kAborted: return "ABORTED";
    case Code::kOutOfRange: return "OUT_OF_RANGE";
    case Code::kUnimplemented: return "UNIMPLEMENTED";
    case Code::kInternal: return "INTERNAL";
    case Code::kUnavailable: return "UNAVAILABLE";
    case Code::kDataLoss: return "DATA_LOSS";
    case Code::kUnauthenticated: return "UNAUTHENTICATED";
  }
  return "UNKNOWN";
}

Status::Status(Code code, std::string message, std::string node) {
  if (code != Code::kOk) {
    rep_ = std::make_shared<const Rep>(
        Rep{code, std::move(message), std::move(node)});
  }
}

static const std::string& EmptyString() {
  static const std::string* empty = new std::string();
  return *empty;
}

const std::string& Status::message() const {
  return rep_ ? rep_->message : EmptyString();
}

const std::string& Status::node() const {
  return rep_ ? rep_->node : EmptyString();
}

Status Status::WithNode(std::string_view node) const {
  if (ok() || !rep_->node.empty()) return *this;
  return Status(rep_->code, rep_->message, std::string(node));
}

Status Status::WithPrefix(std::string_view prefix) const {
  if (ok()) return *this;
  return Status(rep_->code, std::string(prefix) + ": " + rep_->message,
                rep_->node);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(CodeName(rep_->code));
  s += ": ";
  s += rep_->message;
  if (!rep_->node.empty()) {
    s += " [node: ";
    s += rep_->node;
    s += "]";
  }
  return s;
}

void Status::CheckOk() const {
  if (ok()) return;
  std::fprintf(stderr, "flowstate: fatal: %s\n", ToString().c_str());
  std::abort();
}

bool Status::operator==(const Status& other) const {
  if (ok() || other.ok()) return ok() == other.ok();
  return rep_->code == other.rep_->code && rep_->message == other.rep_->message &&
         rep_->node == other.rep_->node;
}

#define FS_DEFINE_ERROR_FACTORY(Name, code)                    \
  Status Name(std::string message, std::string node) {         \
    return Status(Code::code, std::move(message), std::move(node)); \
  }
FS_DEFINE_ERROR_FACTORY(InvalidArgument, kInvalidArgument)
FS_DEFINE_ERROR_FACTORY(NotFound, kNotFound)
FS_DEFINE_ERROR_FACTORY(AlreadyExists, kAlreadyExists)
FS_DEFINE_ERROR_FACTORY(FailedPrecondition, kFailedPrecondition)
FS_DEFINE_ERROR_FACTORY(ResourceExhausted, kResourceExhausted)
FS_DEFINE_ERROR_FACTORY(OutOfRange, kOutOfRange)
FS_DEFINE_ERROR_FACTORY(Unimplemented, kUnimplemented)
FS_DEFINE_ERROR_FACTORY(Internal, kInternal)
FS_DEFINE_ERROR_FACTORY(Cancelled, kCancelled)
FS_DEFINE_ERROR_FACTORY(Aborted, kAborted)
FS_DEFINE_ERROR_FACTORY(Unavailable, kUnavailable)
FS_DEFINE_ERROR_FACTORY(DataLoss, kDataLoss)
FS_DEFINE_ERROR_FACTORY(PermissionDenied, kPermissionDenied)
FS_DEFINE_ERROR_FACTORY(Unauthenticated, kUnauthenticated)
FS_DEFINE_ERROR_FACTORY(DeadlineExceeded, kDeadlineExceeded)
#undef FS_DEFINE_ERROR_FACTORY

}  // namespace flowstate
