// tileops_extern_probe::nop — a torch custom op whose kernel is C++ that calls a TVM-FFI function
// (tvm-ffi's `testing.nop`) with DLTensor pointers, as a compiled TileLang kernel is called, with no
// Python frame in between. compiled_extern_op.py races it against the same op implemented in Python.
#include <ATen/ATen.h>
#include <dlpack/dlpack.h>
#include <torch/library.h>
#include <tvm/ffi/c_api.h>

#include <cstring>

namespace {

TVMFFIObjectHandle nop_function() {
  static TVMFFIObjectHandle fn = [] {
    const char* name = "testing.nop";
    TVMFFIByteArray bytes{name, std::strlen(name)};
    TVMFFIObjectHandle found = nullptr;
    TORCH_CHECK(TVMFFIFunctionGetGlobal(&bytes, &found) == 0 && found, "tvm-ffi has no global function testing.nop");
    return found;
  }();
  return fn;
}

void describe(const at::Tensor& t, DLTensor* dl) {
  TORCH_CHECK(t.is_cpu() && t.scalar_type() == at::kFloat, "the probe takes float32 CPU tensors");
  dl->data = t.data_ptr();
  dl->device = DLDevice{kDLCPU, 0};
  dl->ndim = static_cast<int32_t>(t.dim());
  dl->dtype = DLDataType{kDLFloat, 32, 1};
  dl->shape = const_cast<int64_t*>(t.sizes().data());
  dl->strides = const_cast<int64_t*>(t.strides().data());
  dl->byte_offset = 0;
}

// Eight inputs and one fresh output, as RGDR's compiled function takes nine tensors.
at::Tensor nop(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const at::Tensor& d,
               const at::Tensor& e, const at::Tensor& f, const at::Tensor& g, const at::Tensor& h) {
  at::Tensor out = at::empty_like(h);
  const at::Tensor* tensors[9] = {&a, &b, &c, &d, &e, &f, &g, &h, &out};
  DLTensor dl[9];
  TVMFFIAny args[9];
  for (int i = 0; i < 9; ++i) {
    describe(*tensors[i], &dl[i]);
    std::memset(&args[i], 0, sizeof(TVMFFIAny));
    args[i].type_index = kTVMFFIDLTensorPtr;
    args[i].v_ptr = &dl[i];
  }
  TVMFFIAny result;
  std::memset(&result, 0, sizeof(result));
  result.type_index = kTVMFFINone;
  TORCH_CHECK(TVMFFIFunctionCall(nop_function(), args, 9, &result) == 0, "testing.nop failed");
  return out;
}

}  // namespace

TORCH_LIBRARY(tileops_extern_probe, m) {
  m.def("nop(Tensor a, Tensor b, Tensor c, Tensor d, Tensor e, Tensor f, Tensor g, Tensor h) -> Tensor");
  m.impl("nop", c10::DispatchKey::CompositeExplicitAutograd, TORCH_FN(nop));
}
