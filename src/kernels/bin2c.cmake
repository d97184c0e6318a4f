# Turns a binary file into a C source with a byte array (cmake -P):
#   cmake -DIN=file.fatbin -DOUT=file.c -DNAME=symbol -P bin2c.cmake
# Defines `const unsigned char NAME[]` (16-byte aligned, as cuModuleLoadData
# wants the fatbin header aligned) and `const size_t NAME_size`.
if(NOT IN OR NOT OUT OR NOT NAME)
  message(FATAL_ERROR "bin2c.cmake: IN, OUT and NAME are required")
endif()
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR nbytes "${hex_len} / 2")
# One "0xNN," per byte, a line break every 32 bytes.
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "((0x..,){32})" "\\1\n" body "${body}")
file(WRITE "${OUT}"
  "/* Generated from ${IN} by bin2c.cmake; do not edit. */\n"
  "#include <stddef.h>\n"
  "_Alignas(16) const unsigned char ${NAME}[] = {\n${body}\n};\n"
  "const size_t ${NAME}_size = ${nbytes};\n")
