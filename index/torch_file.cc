#include "index/torch_file.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "index/importers.h"
#include "index/zip_reader.h"
#include "kernels/base/half.h"
#include "kernels/base/status_macros.h"

// The pickle subset (Python's Lib/pickletools.py documents each opcode):
//
//   framing     PROTO n, FRAME n, STOP
//   stack       MARK, POP, POP_MARK, DUP
//   memo        BINPUT, LONG_BINPUT, MEMOIZE, BINGET, LONG_BINGET
//   scalars     NONE, NEWTRUE, NEWFALSE, BININT, BININT1, BININT2, LONG1
//               (up to 8 bytes), BINFLOAT, BINUNICODE, SHORT_BINUNICODE,
//               BINUNICODE8, BINSTRING, SHORT_BINSTRING
//   containers  EMPTY_TUPLE, TUPLE, TUPLE1-3, EMPTY_LIST, LIST, APPEND,
//               APPENDS, EMPTY_DICT, DICT, SETITEM, SETITEMS
//   objects     GLOBAL, STACK_GLOBAL, REDUCE, BINPERSID
//
// and the globals collections.OrderedDict (called with no arguments: the
// empty backward-hooks dict), torch._utils._rebuild_tensor_v2 and the
// torch.<T>Storage types named in persistent ids.
//
// Untrusted input: values are immutable once shared, so a pickle cannot
// build a cycle; a list or dict that was put inside another value before
// being appended to is copied first (and that copying has a budget);
// nesting is limited to kMaxDepth and the materialised result to
// kMaxValues nodes, so shared sub-values cannot blow up exponentially.

namespace maxsimd {
namespace {

constexpr int kMaxDepth = 32;
constexpr int64_t kMaxValues = 1 << 16;
constexpr int64_t kCopyBudget = int64_t{1} << 24;
// Dimensions and element counts past this are refused before multiplying.
constexpr int64_t kMaxElements = int64_t{1} << 48;

struct PValue;
using PPtr = std::shared_ptr<PValue>;

struct PValue {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kTuple,
    kList,
    kDict,
    kGlobal,   // str = "module.name"
    kStorage,  // dtype, str = key, integer = numel
    kTensor,   // items = {storage}, integer = offset, shape, stride
  };
  Kind kind = Kind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0;
  std::string str;
  TorchDType dtype = TorchDType::kFloat32;
  std::vector<PPtr> items;
  std::vector<int64_t> shape, stride;
  int depth = 0;           // 0 for a scalar, 1 + the deepest item otherwise
  bool contained = false;  // is an item of another value
};

struct StorageType {
  const char* name;
  TorchDType dtype;
};
constexpr StorageType kStorageTypes[] = {
    {"FloatStorage", TorchDType::kFloat32},
    {"HalfStorage", TorchDType::kFloat16},
    {"BFloat16Storage", TorchDType::kBFloat16},
    {"DoubleStorage", TorchDType::kFloat64},
    {"ByteStorage", TorchDType::kUInt8},
    {"CharStorage", TorchDType::kInt8},
    {"ShortStorage", TorchDType::kInt16},
    {"IntStorage", TorchDType::kInt32},
    {"LongStorage", TorchDType::kInt64},
    {"BoolStorage", TorchDType::kBool},
};

std::optional<TorchDType> StorageDType(absl::string_view global) {
  if (!absl::ConsumePrefix(&global, "torch.")) return std::nullopt;
  for (const StorageType& t : kStorageTypes) {
    if (global == t.name) return t.dtype;
  }
  return std::nullopt;
}

const char* StorageName(TorchDType dtype) {
  for (const StorageType& t : kStorageTypes) {
    if (t.dtype == dtype) return t.name;
  }
  return "FloatStorage";
}

// Names of the opcodes, for messages.
const char* OpcodeName(uint8_t op) {
  switch (op) {
    case 0x80:
      return "PROTO";
    case 0x95:
      return "FRAME";
    case '.':
      return "STOP";
    case '(':
      return "MARK";
    case '0':
      return "POP";
    case '1':
      return "POP_MARK";
    case '2':
      return "DUP";
    case 'q':
      return "BINPUT";
    case 'r':
      return "LONG_BINPUT";
    case 0x94:
      return "MEMOIZE";
    case 'h':
      return "BINGET";
    case 'j':
      return "LONG_BINGET";
    case 'N':
      return "NONE";
    case 0x88:
      return "NEWTRUE";
    case 0x89:
      return "NEWFALSE";
    case 'J':
      return "BININT";
    case 'K':
      return "BININT1";
    case 'M':
      return "BININT2";
    case 0x8a:
      return "LONG1";
    case 0x8b:
      return "LONG4";
    case 'G':
      return "BINFLOAT";
    case 'X':
      return "BINUNICODE";
    case 0x8c:
      return "SHORT_BINUNICODE";
    case 0x8d:
      return "BINUNICODE8";
    case 'T':
      return "BINSTRING";
    case 'U':
      return "SHORT_BINSTRING";
    case ')':
      return "EMPTY_TUPLE";
    case 't':
      return "TUPLE";
    case 0x85:
      return "TUPLE1";
    case 0x86:
      return "TUPLE2";
    case 0x87:
      return "TUPLE3";
    case ']':
      return "EMPTY_LIST";
    case 'l':
      return "LIST";
    case 'a':
      return "APPEND";
    case 'e':
      return "APPENDS";
    case '}':
      return "EMPTY_DICT";
    case 'd':
      return "DICT";
    case 's':
      return "SETITEM";
    case 'u':
      return "SETITEMS";
    case 'c':
      return "GLOBAL";
    case 0x93:
      return "STACK_GLOBAL";
    case 'R':
      return "REDUCE";
    case 'Q':
      return "BINPERSID";
    case 'P':
      return "PERSID";
    case 'b':
      return "BUILD";
    case 'o':
      return "OBJ";
    case 'i':
      return "INST";
    case 0x81:
      return "NEWOBJ";
    case 0x92:
      return "NEWOBJ_EX";
    case 'I':
      return "INT";
    case 'L':
      return "LONG";
    case 'F':
      return "FLOAT";
    case 'S':
      return "STRING";
    case 'V':
      return "UNICODE";
    case 'p':
      return "PUT";
    case 'g':
      return "GET";
    case 0x8f:
      return "EMPTY_SET";
    case 0x90:
      return "ADDITEMS";
    case 0x91:
      return "FROZENSET";
    case 0x96:
      return "BYTEARRAY8";
    case 'B':
      return "BINBYTES";
    case 'C':
      return "SHORT_BINBYTES";
    case 0x8e:
      return "BINBYTES8";
    case 0x82:
      return "EXT1";
    case 0x83:
      return "EXT2";
    case 0x84:
      return "EXT4";
    default:
      return nullptr;
  }
}

std::string DescribeOpcode(uint8_t op) {
  const char* name = OpcodeName(op);
  const std::string hex = absl::StrCat("0x", absl::Hex(op, absl::kZeroPad2));
  return name != nullptr ? absl::StrCat(name, " (", hex, ")")
                         : absl::StrCat("unknown opcode ", hex);
}

class Unpickler {
 public:
  Unpickler(absl::string_view pickle, absl::string_view name)
      : p_(pickle), name_(name) {}

  absl::StatusOr<PPtr> Run() {
    while (true) {
      if (at_ >= p_.size()) return Error("the pickle ends without STOP");
      op_at_ = at_;
      op_ = static_cast<uint8_t>(p_[at_++]);
      if (op_ == '.') {
        if (stack_.size() != 1 || !marks_.empty()) {
          return Error(absl::StrCat("STOP with ", stack_.size(),
                                    " values on the stack"));
        }
        return stack_.back();
      }
      MAXSIMD_RETURN_IF_ERROR(Step());
    }
  }

 private:
  // Message for the current opcode.
  absl::Status Error(absl::string_view what) const {
    return absl::DataLossError(absl::StrCat(
        "torch file '", name_, "': data.pkl: ", DescribeOpcode(op_),
        " at byte ", op_at_, ": ", what));
  }

  absl::Status Bytes(size_t n, absl::string_view* out) {
    if (p_.size() - at_ < n) return Error("truncated argument");
    *out = p_.substr(at_, n);
    at_ += n;
    return absl::OkStatus();
  }
  absl::StatusOr<uint64_t> Unsigned(size_t n) {
    absl::string_view b;
    MAXSIMD_RETURN_IF_ERROR(Bytes(n, &b));
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) {
      v |= static_cast<uint64_t>(static_cast<uint8_t>(b[i])) << (8 * i);
    }
    return v;
  }
  absl::StatusOr<std::string> Line() {
    const size_t nl = p_.find('\n', at_);
    if (nl == absl::string_view::npos) return Error("unterminated line");
    std::string s(p_.substr(at_, nl - at_));
    at_ = nl + 1;
    return s;
  }

  static PPtr Scalar(PValue::Kind kind) {
    auto v = std::make_shared<PValue>();
    v->kind = kind;
    return v;
  }

  absl::StatusOr<PPtr> Pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) {
      return Error("stack underflow");
    }
    PPtr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  // The values pushed since the last MARK, which is removed.
  absl::StatusOr<std::vector<PPtr>> PopMark() {
    if (marks_.empty()) return Error("no MARK");
    const size_t from = marks_.back();
    marks_.pop_back();
    std::vector<PPtr> items(std::make_move_iterator(stack_.begin() + from),
                            std::make_move_iterator(stack_.end()));
    stack_.resize(from);
    return items;
  }

  // A container of `items`, which become contained.
  absl::StatusOr<PPtr> Container(PValue::Kind kind, std::vector<PPtr> items) {
    auto v = Scalar(kind);
    for (const PPtr& item : items) {
      item->contained = true;
      v->depth = std::max(v->depth, item->depth + 1);
    }
    if (v->depth > kMaxDepth) {
      return Error(absl::StrCat("values nested deeper than ", kMaxDepth));
    }
    v->items = std::move(items);
    return v;
  }

  // Adds items (dict: key, value pairs) to the list or dict on top of the
  // stack, copying it first when it is already inside another value.
  absl::Status Extend(PValue::Kind kind, std::vector<PPtr> items) {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back()) ||
        stack_.back()->kind != kind) {
      return Error(kind == PValue::Kind::kList ? "no list to append to"
                                               : "no dict to set items in");
    }
    if (kind == PValue::Kind::kDict && items.size() % 2 != 0) {
      return Error("an odd number of keys and values");
    }
    // Marking the items first makes appending a list to itself copy it.
    for (const PPtr& item : items) item->contained = true;
    PPtr& target = stack_.back();
    if (target->contained) {
      copied_ += static_cast<int64_t>(target->items.size());
      if (copied_ > kCopyBudget) return Error("too much copying; not torch");
      auto copy = std::make_shared<PValue>(*target);
      copy->contained = false;
      target = std::move(copy);
    }
    for (PPtr& item : items) {
      target->depth = std::max(target->depth, item->depth + 1);
      target->items.push_back(std::move(item));
    }
    if (target->depth > kMaxDepth) {
      return Error(absl::StrCat("values nested deeper than ", kMaxDepth));
    }
    return absl::OkStatus();
  }

  absl::Status Push(PPtr v) {
    stack_.push_back(std::move(v));
    return absl::OkStatus();
  }
  absl::Status PushString(size_t len_bytes) {
    MAXSIMD_ASSIGN_OR_RETURN(uint64_t n, Unsigned(len_bytes));
    absl::string_view s;
    MAXSIMD_RETURN_IF_ERROR(Bytes(n, &s));
    auto v = Scalar(PValue::Kind::kString);
    v->str = std::string(s);
    return Push(std::move(v));
  }
  absl::Status PushInt(int64_t i) {
    auto v = Scalar(PValue::Kind::kInt);
    v->integer = i;
    return Push(std::move(v));
  }
  absl::Status Put(uint64_t index) {
    if (stack_.empty()) return Error("nothing to memoize");
    memo_[index] = stack_.back();
    return absl::OkStatus();
  }
  absl::Status Get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) {
      return Error(absl::StrCat("memo entry ", index, " was never set"));
    }
    return Push(it->second);
  }
  absl::Status Global(std::string module, std::string name) {
    auto v = Scalar(PValue::Kind::kGlobal);
    v->str = absl::StrCat(module, ".", name);
    if (v->str != "torch._utils._rebuild_tensor_v2" &&
        v->str != "collections.OrderedDict" &&
        !StorageDType(v->str).has_value()) {
      return Error(absl::StrCat("global '", v->str.substr(0, 200),
                                "' is not one torch.save writes for tensors"));
    }
    return Push(std::move(v));
  }

  absl::Status PersistentId() {
    MAXSIMD_ASSIGN_OR_RETURN(PPtr pid, Pop());
    const auto& it = pid->items;
    if (pid->kind != PValue::Kind::kTuple || it.size() != 5 ||
        it[0]->kind != PValue::Kind::kString || it[0]->str != "storage" ||
        it[1]->kind != PValue::Kind::kGlobal ||
        it[2]->kind != PValue::Kind::kString ||
        it[3]->kind != PValue::Kind::kString ||
        it[4]->kind != PValue::Kind::kInt) {
      return Error(
          "expected a persistent id ('storage', storage type, key, "
          "location, numel)");
    }
    const std::optional<TorchDType> dtype = StorageDType(it[1]->str);
    if (!dtype.has_value()) {
      return Error(absl::StrCat("'", it[1]->str, "' is not a storage type"));
    }
    if (it[4]->integer < 0 || it[4]->integer > kMaxElements) {
      return Error(
          absl::StrCat("storage numel ", it[4]->integer, " is out of range"));
    }
    auto v = Scalar(PValue::Kind::kStorage);
    v->dtype = *dtype;
    v->str = it[2]->str;
    v->integer = it[4]->integer;
    return Push(std::move(v));
  }

  // Reads a tuple of ints (a tensor's size or stride).
  absl::StatusOr<std::vector<int64_t>> Ints(const PPtr& v,
                                            absl::string_view what) {
    if (v->kind != PValue::Kind::kTuple) {
      return Error(absl::StrCat("the ", what, " is not a tuple"));
    }
    std::vector<int64_t> out;
    for (const PPtr& i : v->items) {
      if (i->kind != PValue::Kind::kInt) {
        return Error(absl::StrCat("the ", what, " holds a non-integer"));
      }
      out.push_back(i->integer);
    }
    return out;
  }

  absl::Status Reduce() {
    MAXSIMD_ASSIGN_OR_RETURN(PPtr args, Pop());
    MAXSIMD_ASSIGN_OR_RETURN(PPtr callable, Pop());
    if (callable->kind != PValue::Kind::kGlobal ||
        args->kind != PValue::Kind::kTuple) {
      return Error("expected a global and a tuple of arguments");
    }
    if (callable->str == "collections.OrderedDict") {
      if (!args->items.empty()) {
        return Error("OrderedDict with arguments is not supported");
      }
      return Push(Scalar(PValue::Kind::kDict));
    }
    if (callable->str != "torch._utils._rebuild_tensor_v2") {
      return Error(absl::StrCat("cannot call '", callable->str, "'"));
    }
    // (storage, storage_offset, size, stride, requires_grad,
    //  backward_hooks[, metadata])
    const auto& a = args->items;
    if (a.size() != 6 && a.size() != 7) {
      return Error(absl::StrCat("_rebuild_tensor_v2 with ", a.size(),
                                " arguments; expected 6 or 7"));
    }
    if (a[0]->kind != PValue::Kind::kStorage ||
        a[1]->kind != PValue::Kind::kInt || a[4]->kind != PValue::Kind::kBool) {
      return Error(
          "_rebuild_tensor_v2 expects (storage, offset, size, stride, "
          "requires_grad, hooks)");
    }
    if (a[5]->kind != PValue::Kind::kDict || !a[5]->items.empty()) {
      return Error("tensors with backward hooks are not supported");
    }
    auto t = Scalar(PValue::Kind::kTensor);
    MAXSIMD_ASSIGN_OR_RETURN(t->shape, Ints(a[2], "size"));
    MAXSIMD_ASSIGN_OR_RETURN(t->stride, Ints(a[3], "stride"));
    if (t->shape.size() != t->stride.size() || t->shape.size() > 16) {
      return Error(absl::StrCat("size has ", t->shape.size(),
                                " dimensions and stride ", t->stride.size(),
                                " (at most 16)"));
    }
    t->integer = a[1]->integer;
    t->dtype = a[0]->dtype;
    a[0]->contained = true;
    t->items = {a[0]};
    t->depth = 1;
    return Push(std::move(t));
  }

  absl::Status Step() {
    switch (op_) {
      case 0x80: {  // PROTO
        MAXSIMD_ASSIGN_OR_RETURN(uint64_t proto, Unsigned(1));
        if (proto > 5) return Error(absl::StrCat("protocol ", proto));
        return absl::OkStatus();
      }
      case 0x95:  // FRAME: the framed opcodes follow inline.
        return Unsigned(8).status();
      case '(':
        marks_.push_back(stack_.size());
        return absl::OkStatus();
      case '0':
        return Pop().status();
      case '1':
        return PopMark().status();
      case '2': {
        MAXSIMD_ASSIGN_OR_RETURN(PPtr v, Pop());
        stack_.push_back(v);
        return Push(std::move(v));
      }
      case 'q': {
        MAXSIMD_ASSIGN_OR_RETURN(uint64_t i, Unsigned(1));
        return Put(i);
      }
      case 'r': {
        MAXSIMD_ASSIGN_OR_RETURN(uint64_t i, Unsigned(4));
        return Put(i);
      }
      case 0x94:
        return Put(memo_.size());
      case 'h': {
        MAXSIMD_ASSIGN_OR_RETURN(uint64_t i, Unsigned(1));
        return Get(i);
      }
      case 'j': {
        MAXSIMD_ASSIGN_OR_RETURN(uint64_t i, Unsigned(4));
        return Get(i);
      }
      case 'N':
        return Push(Scalar(PValue::Kind::kNone));
      case 0x88:
      case 0x89: {
        auto v = Scalar(PValue::Kind::kBool);
        v->boolean = op_ == 0x88;
        return Push(std::move(v));
      }
      case 'J': {
        MAXSIMD_ASSIGN_OR_RETURN(uint64_t u, Unsigned(4));
        return PushInt(static_cast<int32_t>(static_cast<uint32_t>(u)));
      }
      case 'K': {
        MAXSIMD_ASSIGN_OR_RETURN(uint64_t u, Unsigned(1));
        return PushInt(static_cast<int64_t>(u));
      }
      case 'M': {
        MAXSIMD_ASSIGN_OR_RETURN(uint64_t u, Unsigned(2));
        return PushInt(static_cast<int64_t>(u));
      }
      case 0x8a: {  // LONG1: n bytes of little-endian two's complement
        MAXSIMD_ASSIGN_OR_RETURN(uint64_t n, Unsigned(1));
        if (n > 8) return Error(absl::StrCat(n, "-byte integer"));
        if (n == 0) return PushInt(0);
        MAXSIMD_ASSIGN_OR_RETURN(uint64_t u, Unsigned(n));
        if (n < 8 && (u >> (8 * n - 1)) != 0) u |= ~uint64_t{0} << (8 * n);
        return PushInt(static_cast<int64_t>(u));
      }
      case 'G': {  // big-endian IEEE double
        absl::string_view b;
        MAXSIMD_RETURN_IF_ERROR(Bytes(8, &b));
        uint64_t bits = 0;
        for (char c : b) bits = (bits << 8) | static_cast<uint8_t>(c);
        auto v = Scalar(PValue::Kind::kFloat);
        std::memcpy(&v->number, &bits, sizeof(bits));
        return Push(std::move(v));
      }
      case 'X':
      case 'T':
        return PushString(4);
      case 0x8c:
      case 'U':
        return PushString(1);
      case 0x8d:
        return PushString(8);
      case ')':
        return Push(Scalar(PValue::Kind::kTuple));
      case 't': {
        MAXSIMD_ASSIGN_OR_RETURN(std::vector<PPtr> items, PopMark());
        MAXSIMD_ASSIGN_OR_RETURN(
            PPtr v, Container(PValue::Kind::kTuple, std::move(items)));
        return Push(std::move(v));
      }
      case 0x85:
      case 0x86:
      case 0x87: {
        std::vector<PPtr> items(op_ - 0x84);
        for (size_t i = items.size(); i-- > 0;) {
          MAXSIMD_ASSIGN_OR_RETURN(items[i], Pop());
        }
        MAXSIMD_ASSIGN_OR_RETURN(
            PPtr v, Container(PValue::Kind::kTuple, std::move(items)));
        return Push(std::move(v));
      }
      case ']':
        return Push(Scalar(PValue::Kind::kList));
      case '}':
        return Push(Scalar(PValue::Kind::kDict));
      case 'l':
      case 'd': {
        MAXSIMD_ASSIGN_OR_RETURN(std::vector<PPtr> items, PopMark());
        if (op_ == 'd' && items.size() % 2 != 0) {
          return Error("an odd number of keys and values");
        }
        MAXSIMD_ASSIGN_OR_RETURN(
            PPtr v,
            Container(op_ == 'l' ? PValue::Kind::kList : PValue::Kind::kDict,
                      std::move(items)));
        return Push(std::move(v));
      }
      case 'a': {
        MAXSIMD_ASSIGN_OR_RETURN(PPtr item, Pop());
        return Extend(PValue::Kind::kList, {std::move(item)});
      }
      case 's': {
        MAXSIMD_ASSIGN_OR_RETURN(PPtr value, Pop());
        MAXSIMD_ASSIGN_OR_RETURN(PPtr key, Pop());
        return Extend(PValue::Kind::kDict, {std::move(key), std::move(value)});
      }
      case 'e':
      case 'u': {
        MAXSIMD_ASSIGN_OR_RETURN(std::vector<PPtr> items, PopMark());
        return Extend(op_ == 'e' ? PValue::Kind::kList : PValue::Kind::kDict,
                      std::move(items));
      }
      case 'c': {
        MAXSIMD_ASSIGN_OR_RETURN(std::string module, Line());
        MAXSIMD_ASSIGN_OR_RETURN(std::string name, Line());
        return Global(std::move(module), std::move(name));
      }
      case 0x93: {
        MAXSIMD_ASSIGN_OR_RETURN(PPtr name, Pop());
        MAXSIMD_ASSIGN_OR_RETURN(PPtr module, Pop());
        if (name->kind != PValue::Kind::kString ||
            module->kind != PValue::Kind::kString) {
          return Error("expected a module and a name");
        }
        return Global(module->str, name->str);
      }
      case 'R':
        return Reduce();
      case 'Q':
        return PersistentId();
      default:
        return Error("not an opcode torch.save writes for tensors");
    }
  }

  absl::string_view p_;
  absl::string_view name_;
  size_t at_ = 0;
  size_t op_at_ = 0;
  uint8_t op_ = 0;
  std::vector<PPtr> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PPtr> memo_;
  int64_t copied_ = 0;
};

// Turns the unpickled value into a TorchValue, resolving each tensor's
// storage to its record.
class Materializer {
 public:
  Materializer(const std::vector<ZipEntry>& entries, absl::string_view prefix,
               std::shared_ptr<const std::string> owner, absl::string_view name)
      : entries_(entries),
        prefix_(prefix),
        owner_(std::move(owner)),
        name_(name) {}

  absl::Status Convert(const PValue& v, TorchValue* out) {
    if (++values_ > kMaxValues) {
      return Corrupt(absl::StrCat("more than ", kMaxValues, " values"));
    }
    switch (v.kind) {
      case PValue::Kind::kNone:
        out->kind = TorchValue::Kind::kNone;
        return absl::OkStatus();
      case PValue::Kind::kBool:
        out->kind = TorchValue::Kind::kBool;
        out->boolean = v.boolean;
        return absl::OkStatus();
      case PValue::Kind::kInt:
        out->kind = TorchValue::Kind::kInt;
        out->integer = v.integer;
        return absl::OkStatus();
      case PValue::Kind::kFloat:
        out->kind = TorchValue::Kind::kFloat;
        out->number = v.number;
        return absl::OkStatus();
      case PValue::Kind::kString:
        out->kind = TorchValue::Kind::kString;
        out->str = v.str;
        return absl::OkStatus();
      case PValue::Kind::kTuple:
      case PValue::Kind::kList:
      case PValue::Kind::kDict:
        out->kind = v.kind == PValue::Kind::kTuple  ? TorchValue::Kind::kTuple
                    : v.kind == PValue::Kind::kList ? TorchValue::Kind::kList
                                                    : TorchValue::Kind::kDict;
        out->items.resize(v.items.size());
        for (size_t i = 0; i < v.items.size(); ++i) {
          MAXSIMD_RETURN_IF_ERROR(Convert(*v.items[i], &out->items[i]));
        }
        return absl::OkStatus();
      case PValue::Kind::kTensor:
        out->kind = TorchValue::Kind::kTensor;
        return Tensor(v, &out->tensor);
      case PValue::Kind::kGlobal:
      case PValue::Kind::kStorage:
        break;
    }
    return Corrupt(
        "the pickle holds a bare global or storage, not a tensor or a "
        "plain value");
  }

 private:
  absl::Status Corrupt(absl::string_view what) const {
    return absl::DataLossError(
        absl::StrCat("torch file '", name_, "': ", what));
  }

  absl::Status Tensor(const PValue& v, TorchTensor* out) {
    const PValue& storage = *v.items[0];
    const int64_t esize = TorchDTypeSize(storage.dtype);
    const std::string record = absl::StrCat(prefix_, "data/", storage.str);
    const ZipEntry* entry = nullptr;
    for (const ZipEntry& e : entries_) {
      if (e.name == record) entry = &e;
    }
    if (entry == nullptr) {
      return Corrupt(absl::StrCat("no record '", record, "' for storage '",
                                  storage.str, "'"));
    }
    if (static_cast<uint64_t>(entry->data.size()) !=
        static_cast<uint64_t>(storage.integer * esize)) {
      return Corrupt(absl::StrCat(
          "record '", record, "' has ", entry->data.size(),
          " bytes; storage of ", storage.integer, " ",
          TorchDTypeName(storage.dtype), " needs ", storage.integer * esize));
    }
    // Row-major contiguity: each stride is the product of the later sizes
    // (dimensions of size 0 or 1 may carry any stride, as in PyTorch).
    int64_t numel = 1;
    bool empty = false;
    for (int64_t d : v.shape) {
      if (d < 0 || d > kMaxElements) {
        return Corrupt(absl::StrCat("tensor dimension ", d, " out of range"));
      }
      if (d == 0) empty = true;
      if (!empty && numel > kMaxElements / std::max<int64_t>(d, 1)) {
        return Corrupt("tensor has too many elements");
      }
      numel = empty ? 0 : numel * d;
    }
    int64_t expected = 1;
    for (size_t i = v.shape.size(); i-- > 0;) {
      if (!empty && v.shape[i] > 1 && v.stride[i] != expected) {
        std::string shape, stride;
        for (size_t j = 0; j < v.shape.size(); ++j) {
          absl::StrAppend(&shape, j > 0 ? "," : "", v.shape[j]);
          absl::StrAppend(&stride, j > 0 ? "," : "", v.stride[j]);
        }
        return absl::InvalidArgumentError(
            absl::StrCat("torch file '", name_, "': tensor of size (", shape,
                         ") has non-contiguous strides (", stride,
                         "); save tensor.contiguous() instead"));
      }
      expected *= std::max<int64_t>(v.shape[i], 1);
    }
    const int64_t offset = v.integer;
    if (offset < 0 || offset > storage.integer ||
        numel > storage.integer - offset) {
      return Corrupt(absl::StrCat(
          "tensor of ", numel, " elements at storage offset ", offset,
          " lies outside its storage of ", storage.integer));
    }
    out->dtype = storage.dtype;
    out->shape = v.shape;
    out->data = entry->data.substr(static_cast<size_t>(offset * esize),
                                   static_cast<size_t>(numel * esize));
    out->owner = owner_;
    return absl::OkStatus();
  }

  const std::vector<ZipEntry>& entries_;
  absl::string_view prefix_;
  std::shared_ptr<const std::string> owner_;
  absl::string_view name_;
  int64_t values_ = 0;
};

// The pickle of _rebuild_tensor_v2(storage `key`, 0, shape, strides, False,
// OrderedDict()), as torch.save writes it (protocol 2), without memo ops.
void PickleTensor(const TorchTensor& t, absl::string_view key,
                  std::string* out) {
  auto unicode = [&](absl::string_view s) {
    out->push_back('X');
    for (int i = 0; i < 4; ++i) {
      out->push_back(static_cast<char>((s.size() >> (8 * i)) & 0xFF));
    }
    out->append(s.data(), s.size());
  };
  auto integer = [&](int64_t v) {
    out->push_back(static_cast<char>(0x8a));  // LONG1, 8 bytes
    out->push_back(8);
    for (int i = 0; i < 8; ++i) {
      out->push_back(
          static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xFF));
    }
  };
  *out += "ctorch._utils\n_rebuild_tensor_v2\n(";
  out->push_back('(');
  unicode("storage");
  absl::StrAppend(out, "ctorch\n", StorageName(t.dtype), "\n");
  unicode(key);
  unicode("cpu");
  integer(t.num_elements());
  *out += "tQ";
  integer(0);
  out->push_back('(');
  for (int64_t d : t.shape) integer(d);
  out->push_back('t');
  out->push_back('(');
  int64_t stride = 1;
  std::vector<int64_t> strides(t.shape.size());
  for (size_t i = t.shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(t.shape[i], 1);
  }
  for (int64_t s : strides) integer(s);
  out->push_back('t');
  out->push_back(static_cast<char>(0x89));  // NEWFALSE
  *out += "ccollections\nOrderedDict\n)R";
  *out += "tR";
}

std::string SerializeTensors(const std::vector<TorchTensor>& tensors,
                             bool tuple, absl::string_view archive) {
  std::string pickle = "\x80\x02";
  if (tuple) pickle.push_back('(');
  std::vector<std::pair<std::string, std::string>> records;
  records.emplace_back(absl::StrCat(archive, "/data.pkl"), "");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string key = absl::StrCat(i);
    PickleTensor(tensors[i], key, &pickle);
    records.emplace_back(absl::StrCat(archive, "/data/", key),
                         std::string(tensors[i].data));
  }
  if (tuple) pickle.push_back('t');
  pickle.push_back('.');
  records[0].second = std::move(pickle);
  records.emplace_back(absl::StrCat(archive, "/version"), "3\n");
  return SerializeStoredZip(records);
}

}  // namespace

const char* TorchDTypeName(TorchDType dtype) {
  switch (dtype) {
    case TorchDType::kFloat32:
      return "float32";
    case TorchDType::kFloat16:
      return "float16";
    case TorchDType::kBFloat16:
      return "bfloat16";
    case TorchDType::kFloat64:
      return "float64";
    case TorchDType::kUInt8:
      return "uint8";
    case TorchDType::kInt8:
      return "int8";
    case TorchDType::kInt16:
      return "int16";
    case TorchDType::kInt32:
      return "int32";
    case TorchDType::kInt64:
      return "int64";
    case TorchDType::kBool:
      return "bool";
  }
  return "unknown";
}

int64_t TorchDTypeSize(TorchDType dtype) {
  switch (dtype) {
    case TorchDType::kFloat64:
    case TorchDType::kInt64:
      return 8;
    case TorchDType::kFloat32:
    case TorchDType::kInt32:
      return 4;
    case TorchDType::kFloat16:
    case TorchDType::kBFloat16:
    case TorchDType::kInt16:
      return 2;
    case TorchDType::kUInt8:
    case TorchDType::kInt8:
    case TorchDType::kBool:
      return 1;
  }
  return 1;
}

int64_t TorchTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<TorchValue> ParseTorchFile(std::string bytes,
                                          absl::string_view name) {
  auto owner = std::make_shared<const std::string>(std::move(bytes));
  if (owner->size() >= 2 && static_cast<uint8_t>((*owner)[0]) == 0x80 &&
      (*owner)[1] == 0x02) {
    return absl::InvalidArgumentError(absl::StrCat(
        "torch file '", name,
        "' uses the legacy (pre-1.6) torch.save format; re-save it with "
        "a current PyTorch"));
  }
  MAXSIMD_ASSIGN_OR_RETURN(std::vector<ZipEntry> entries,
                           ParseStoredZip(*owner, name));
  // The pickle is <archive>/data.pkl, one folder deep.
  const ZipEntry* pickle = nullptr;
  for (const ZipEntry& e : entries) {
    const size_t slash = e.name.find('/');
    if (slash == std::string::npos || e.name.substr(slash) != "/data.pkl") {
      continue;
    }
    if (pickle != nullptr) {
      return absl::DataLossError(absl::StrCat(
          "torch file '", name, "': more than one data.pkl record"));
    }
    pickle = &e;
  }
  if (pickle == nullptr) {
    return absl::DataLossError(absl::StrCat(
        "torch file '", name,
        "': no <archive>/data.pkl record (not a torch.save file)"));
  }
  const std::string prefix =
      pickle->name.substr(0, pickle->name.size() - strlen("data.pkl"));
  for (const ZipEntry& e : entries) {
    if (e.name == prefix + "byteorder" && e.data != "little") {
      return absl::InvalidArgumentError(absl::StrCat(
          "torch file '", name, "': byte order '", e.data.substr(0, 16),
          "' is not supported (only little)"));
    }
  }
  MAXSIMD_ASSIGN_OR_RETURN(PPtr root, Unpickler(pickle->data, name).Run());
  TorchValue out;
  MAXSIMD_RETURN_IF_ERROR(
      Materializer(entries, prefix, owner, name).Convert(*root, &out));
  return out;
}

absl::StatusOr<TorchValue> ReadTorchFile(const std::string& path) {
  MAXSIMD_ASSIGN_OR_RETURN(std::string bytes, ReadInputFile(path));
  return ParseTorchFile(std::move(bytes), path);
}

absl::StatusOr<std::vector<float>> TorchTensorToFloat32(
    const TorchTensor& t, absl::string_view name) {
  const size_t n = static_cast<size_t>(t.num_elements());
  std::vector<float> out(n);
  const char* p = t.data.data();
  switch (t.dtype) {
    case TorchDType::kFloat32:
      if (n > 0) std::memcpy(out.data(), p, n * 4);
      return out;
    case TorchDType::kFloat16:
    case TorchDType::kBFloat16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = t.dtype == TorchDType::kFloat16
                     ? HalfToFloat(h)
                     : BitsToFloat(static_cast<uint32_t>(h) << 16);
      }
      return out;
    case TorchDType::kFloat64:
      for (size_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        out[i] = static_cast<float>(d);
      }
      return out;
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("torch file '", name, "': expected a floating-point ",
                   "tensor, got ", TorchDTypeName(t.dtype)));
}

absl::StatusOr<std::vector<int64_t>> TorchTensorToInt64(
    const TorchTensor& t, absl::string_view name) {
  const size_t n = static_cast<size_t>(t.num_elements());
  std::vector<int64_t> out(n);
  const char* p = t.data.data();
  auto widen = [&](auto type_tag) {
    using T = decltype(type_tag);
    for (size_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, p + sizeof(T) * i, sizeof(T));
      out[i] = static_cast<int64_t>(v);
    }
  };
  switch (t.dtype) {
    case TorchDType::kUInt8:
    case TorchDType::kBool:
      widen(uint8_t{});
      return out;
    case TorchDType::kInt8:
      widen(int8_t{});
      return out;
    case TorchDType::kInt16:
      widen(int16_t{});
      return out;
    case TorchDType::kInt32:
      widen(int32_t{});
      return out;
    case TorchDType::kInt64:
      widen(int64_t{});
      return out;
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("torch file '", name, "': expected an integer tensor, got ",
                   TorchDTypeName(t.dtype)));
}

std::string SerializeTorchTensor(const TorchTensor& t,
                                 absl::string_view archive) {
  return SerializeTensors({t}, /*tuple=*/false, archive);
}

std::string SerializeTorchTensorTuple(const std::vector<TorchTensor>& tensors,
                                      absl::string_view archive) {
  return SerializeTensors(tensors, /*tuple=*/true, archive);
}

}  // namespace maxsimd
