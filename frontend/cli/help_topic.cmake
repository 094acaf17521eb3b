# help_topic.cmake — writes OUT, a C file holding the train section's reference from
# frontend/README.md (from its "### The train section" heading to the next "### "), code
# fences dropped, as a NUL-terminated byte array: what `ftc help ft` prints. One text, kept
# where the language is documented:
#   cmake -DOUT=help_ft.c -DREADME=frontend/README.md -P help_topic.cmake
file(READ ${README} text)
string(FIND "${text}" "### The train section" from)
if(from EQUAL -1)
  message(FATAL_ERROR "${README} has no '### The train section'")
endif()
string(SUBSTRING "${text}" ${from} -1 text)
string(SUBSTRING "${text}" 4 -1 rest)   # past the heading's own ###
string(FIND "${rest}" "\n### " to)
if(NOT to EQUAL -1)
  math(EXPR to "${to} + 5")
  string(SUBSTRING "${text}" 0 ${to} text)
endif()
string(REPLACE "```\n" "" text "${text}")
string(REGEX REPLACE "^### " "" text "${text}")
file(WRITE ${OUT}.txt "${text}")
file(READ ${OUT}.txt hex HEX)
file(REMOVE ${OUT}.txt)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE ${OUT}.tmp "// Generated from frontend/README.md by help_topic.cmake: do not edit.\n"
     "static const unsigned char text[] = {${bytes}0x00};\nconst char *const cli_help_ft = (const char *)text;\n")
file(RENAME ${OUT}.tmp ${OUT})
