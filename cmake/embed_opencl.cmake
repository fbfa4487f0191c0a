# Turns the OpenCL C kernels (ops/opencl/*.cl) into one C file of byte
# arrays, run by the build whenever a kernel changes. Bytes rather than
# string literals: no quote or backslash in a kernel needs escaping, and no
# compiler's limit on string length applies. IN is the list of files with
# '|' between them, OUT the C file to write.
string(REPLACE "|" ";" IN "${IN}")
set(body "// Generated from ops/opencl/*.cl by cmake/embed_opencl.cmake; do not edit.\n")
string(APPEND body "#include \"ops/opencl/opencl_sources.h\"\n\n")
set(table "")
foreach(f ${IN})
  get_filename_component(name ${f} NAME_WE)
  file(READ ${f} hex HEX)
  string(LENGTH "${hex}" digits)
  math(EXPR bytes "${digits} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," arr "${hex}")
  string(REGEX REPLACE "((0x..,){24})" "\\1\n" arr "${arr}")
  string(APPEND body "static const unsigned char src_${name}[] = {\n${arr}0};\n\n")
  string(APPEND table "    {\"${name}\", (const char *)src_${name}, ${bytes}},\n")
endforeach()
string(APPEND body "const rg_cl_source_t rg__cl_sources[] = {\n${table}};\n")
string(APPEND body "const size_t rg__cl_source_count = sizeof rg__cl_sources / sizeof rg__cl_sources[0];\n")
file(WRITE "${OUT}" "${body}")
