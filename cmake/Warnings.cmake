# One place for compiler flags that every target gets. Sanitizers are added here, never by replacing
# a target's properties, so a target's own options survive.
add_compile_options(-Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2
                    -Wno-unused-parameter -fno-common)
if(AUTOHA_WERROR)
  add_compile_options(-Werror)
endif()
# POSIX and GNU interfaces (dlvsym, futex, program_invocation_name) are used deliberately.
add_compile_definitions(_GNU_SOURCE)

set(AUTOHA_SANITIZE_FLAGS "")
if(AUTOHA_ASAN)
  list(APPEND AUTOHA_SANITIZE_FLAGS -fsanitize=address -fno-omit-frame-pointer)
endif()
if(AUTOHA_UBSAN)
  list(APPEND AUTOHA_SANITIZE_FLAGS -fsanitize=undefined -fno-sanitize-recover=all)
endif()
if(AUTOHA_SANITIZE_FLAGS)
  add_compile_options(${AUTOHA_SANITIZE_FLAGS})
  add_link_options(${AUTOHA_SANITIZE_FLAGS})
endif()
