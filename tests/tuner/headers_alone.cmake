# Compiles each header in HEADERS as the only include of an empty C11 file, with the project's
# warnings as errors, so no header depends on what its includer happened to include first.
# Usage: cmake -DCC=cc -DINCLUDES=a;b [-DSYSTEM_INCLUDES=c;d] -DHEADERS=x.h;y.h -P headers_alone.cmake
# (SYSTEM_INCLUDES: third-party headers, e.g. CUDA's and NCCL's, whose own warnings are not ours)
set(_flags -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes
           -Wmissing-prototypes -Wno-unused-parameter -fsyntax-only)
foreach(_i IN LISTS INCLUDES)
  list(APPEND _flags -I${_i})
endforeach()
foreach(_i IN LISTS SYSTEM_INCLUDES)
  list(APPEND _flags -isystem ${_i})
endforeach()
set(_failed "")
# A file of this header list's own: tuner_headers_alone and all_headers_alone run in one folder,
# and under ctest -j they ran at once, each compiling the other's include (a flake CI's sanitizer
# run hit).
string(MD5 _tag "${HEADERS}")
set(_src ${CMAKE_CURRENT_BINARY_DIR}/ah_header_alone_${_tag}.c)
list(LENGTH HEADERS _n)
if(_n EQUAL 0)
  message(FATAL_ERROR "no headers given")
endif()
foreach(_h IN LISTS HEADERS)
  file(WRITE ${_src} "#include \"${_h}\"\n")
  execute_process(COMMAND ${CC} ${_flags} ${_src}
                  RESULT_VARIABLE _rc ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(SEND_ERROR "${_h} does not compile on its own:\n${_err}")
    list(APPEND _failed ${_h})
  endif()
endforeach()
file(REMOVE ${_src})
if(_failed)
  message(FATAL_ERROR "headers that do not compile alone: ${_failed}")
endif()
message(STATUS "${_n} headers compile alone")
