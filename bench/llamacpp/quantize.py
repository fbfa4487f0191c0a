#!/usr/bin/env python3
"""Converts a GGUF to another llama_ftype with llama.cpp's own quantizer
(llama_model_quantize in the prebuilt libllama npm's node-llama-cpp ships),
so ridge and llama.cpp are compared on a file llama.cpp wrote.

  python3 quantize.py LIBLLAMA_SO IN.gguf OUT.gguf {bf16,f16,q8_0,q4_K_M} [threads]

Only the first two fields of llama_model_quantize_params are set (nthread,
ftype: stable across llama.cpp versions); the rest keep the library's
defaults, which it fills in itself.
"""
import ctypes
import sys

FTYPES = {"f16": 1, "q8_0": 7, "q4_K_M": 15, "bf16": 32}


class Params(ctypes.Structure):
    # Larger than the real struct: the library writes its defaults into it
    # (returned through a hidden pointer) and reads only its own fields.
    _fields_ = [("raw", ctypes.c_ubyte * 512)]


def main():
    lib = ctypes.CDLL(sys.argv[1])
    lib.llama_model_quantize_default_params.restype = Params
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(Params)]
    lib.llama_model_quantize.restype = ctypes.c_uint32
    lib.llama_backend_init()
    p = lib.llama_model_quantize_default_params()
    ctypes.c_int32.from_buffer(p.raw, 0).value = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    ctypes.c_int32.from_buffer(p.raw, 4).value = FTYPES[sys.argv[4]]
    return 1 if lib.llama_model_quantize(sys.argv[2].encode(), sys.argv[3].encode(), ctypes.byref(p)) else 0


if __name__ == "__main__":
    sys.exit(main())
