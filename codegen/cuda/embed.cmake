# embed.cmake — writes OUT, a C file holding the CUDA sources in FILES (paths joined by
# '|') as NUL-terminated byte arrays, so ftc carries its kernel templates inside the binary:
#   cmake -DOUT=cuda_files.c -DFILES="a.cuh|b.cuh" -P embed.cmake
set(body "// Generated from codegen/cuda by embed.cmake: do not edit.\n#include \"codegen.h\"\n\n")
set(table "")
set(i 0)
string(REPLACE "|" ";" FILES "${FILES}")
foreach(path ${FILES})
  get_filename_component(name ${path} NAME)
  file(READ ${path} hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND body "static const unsigned char f${i}[] = {${bytes}0x00};\n")
  string(APPEND table "    {\"${name}\", (const char *)f${i}},\n")
  math(EXPR i "${i} + 1")
endforeach()
string(APPEND body "\nconst CudaFile codegen_cuda_files[] = {\n${table}    {0, 0},\n};\n")
file(WRITE ${OUT}.tmp "${body}")
file(RENAME ${OUT}.tmp ${OUT})
