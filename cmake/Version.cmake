# autoha's version string: the project version, plus `git describe --always --dirty` of the source
# tree when it is a git checkout of its own (so "0.1.0+c176ef7-dirty"), else the project version
# alone (a release tarball, a pip sdist). cmake/WriteVersion.cmake writes it into
# ${AUTOHA_GENERATED_DIR}/ah_version_gen.h at configure time and again at every build, rewriting the
# file only when the string changes, so a commit or an edit is reflected without reconfiguring and
# an unchanged tree recompiles nothing. base/ah_version.c is the one file that includes it.
set(AUTOHA_GENERATED_DIR ${CMAKE_BINARY_DIR}/generated)
set(_autoha_version_args -DSOURCE_DIR=${CMAKE_SOURCE_DIR} -DOUT=${AUTOHA_GENERATED_DIR}/ah_version_gen.h
    -DVERSION=${PROJECT_VERSION})
execute_process(COMMAND ${CMAKE_COMMAND} ${_autoha_version_args} -P ${CMAKE_SOURCE_DIR}/cmake/WriteVersion.cmake)
add_custom_target(autoha_version_h
  COMMAND ${CMAKE_COMMAND} ${_autoha_version_args} -P ${CMAKE_SOURCE_DIR}/cmake/WriteVersion.cmake
  BYPRODUCTS ${AUTOHA_GENERATED_DIR}/ah_version_gen.h
  COMMENT "autoha version string"
  VERBATIM)
