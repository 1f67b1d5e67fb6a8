# What `cmake --install build --prefix P` puts where (GNUInstallDirs), in two components:
#   autoha  P/lib/libautoha.so (the library users preload), P/bin/autoha (the command line) and
#           P/share/autoha/python/autoha (the Python package `autoha plot` runs);
#           with AUTOHA_BUNDLE_JANSSON also P/lib/libjansson.so.4 and its copyright (below)
#   sim     sim/'s CPU stand-ins, for trying autoha on a machine without GPUs: libncclsim.so under
#           each name it answers to, the verbs provider (libibverbs.so.1, libmlx5.so.1) and the
#           preload stand-ins, all in P/lib/autoha-sim/ (the folder a job puts first on
#           LD_LIBRARY_PATH, as it does the build's simlib/), and ncclsim-run, ncclsim-fabric and
#           train_job in P/bin.
# Installed programs find their libraries through RPATHs relative to $ORIGIN, so a prefix can be
# moved or unpacked anywhere (a .deb, a wheel) and still runs.
include(GNUInstallDirs)

set(AUTOHA_SIM_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/autoha-sim)

install(TARGETS autoha LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT autoha)
install(TARGETS autoha_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT autoha)
# The Python package, for `autoha plot` (python3 -m autoha plot draws with matplotlib): in
# share/autoha/python, where the program looks. A wheel (SKBUILD) is that package already.
if(NOT SKBUILD)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/autoha DESTINATION ${CMAKE_INSTALL_DATADIR}/autoha/python
          COMPONENT autoha PATTERN __pycache__ EXCLUDE)
endif()

# jansson beside libautoha.so, with its copyright, only with AUTOHA_BUNDLE_JANSSON (the wheel's,
# pyproject.toml): a pip install has no package manager to bring libjansson4, and
# tuner/ah_jansson.c looks beside the library first. Not in the .deb nor a plain prefix, where
# the distribution's package is the one copy (the .deb Depends on libjansson4, Package.cmake): a
# second libjansson.so.4 in /usr/lib would stand on the loader's default path beside it. The copy
# is the real file behind the libjansson.so.4 link, under that name; `autoha` itself opens it
# through its RUNPATH, the bin-to-lib path (it looks beside itself, in bin/, first).
if(AUTOHA_BUNDLE_JANSSON)
  find_file(JANSSON_COPYRIGHT copyright PATHS /usr/share/doc/libjansson4 NO_DEFAULT_PATH)
  if(NOT JANSSON_RUNTIME_REAL OR NOT JANSSON_COPYRIGHT)
    message(FATAL_ERROR "AUTOHA_BUNDLE_JANSSON: libjansson.so.4 or /usr/share/doc/libjansson4/copyright "
            "not found: run scripts/install-deps (Debian package libjansson4).")
  endif()
  install(FILES ${JANSSON_RUNTIME_REAL} DESTINATION ${CMAKE_INSTALL_LIBDIR} RENAME libjansson.so.4
          COMPONENT autoha)
  install(FILES ${JANSSON_COPYRIGHT} DESTINATION ${CMAKE_INSTALL_LIBDIR} RENAME libjansson.so.4.copyright
          COMPONENT autoha)
  file(RELATIVE_PATH _cli_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
  set_target_properties(autoha_cli PROPERTIES INSTALL_RPATH "$ORIGIN/${_cli_to_lib}")
endif()

if(AUTOHA_BUILD_SIM)
  # From bin/ to the sim folder, and from a preload stand-in back up to libncclsim.so.
  file(RELATIVE_PATH _bin_to_sim ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}
       ${CMAKE_INSTALL_PREFIX}/${AUTOHA_SIM_INSTALL_DIR})
  set_target_properties(train_job PROPERTIES INSTALL_RPATH "$ORIGIN/${_bin_to_sim}")
  # ncclsim-run --preload finds the installed stand-ins from its own folder.
  target_compile_definitions(ncclsim-run PRIVATE NCCLSIM_BIN_TO_PRELOAD="${_bin_to_sim}/preload")
  set_target_properties(ncclsim_mlx5 PROPERTIES INSTALL_RPATH "$ORIGIN")
  foreach(_t IN LISTS SIM_STANDINS)
    set_target_properties(${_t} PROPERTIES INSTALL_RPATH "$ORIGIN/..")
  endforeach()

  install(TARGETS ncclsim ncclsim_verbs ncclsim_mlx5
          LIBRARY DESTINATION ${AUTOHA_SIM_INSTALL_DIR} COMPONENT sim)
  install(TARGETS ${SIM_STANDINS} LIBRARY DESTINATION ${AUTOHA_SIM_INSTALL_DIR}/preload COMPONENT sim)
  # The aliases are symlinks made next to the libraries at build time; file(INSTALL) copies a
  # symlink as a symlink, so the installed folder holds one libncclsim.so under every name.
  set(_aliases)
  foreach(_a IN ITEMS libnccl.so libnccl.so.2 libcudart.so libcudart.so.12 libcudart.so.13
                      libcuda.so libcuda.so.1 libibverbs.so)
    list(APPEND _aliases ${SIM_LIB_DIR}/${_a})
  endforeach()
  install(FILES ${_aliases} DESTINATION ${AUTOHA_SIM_INSTALL_DIR} COMPONENT sim)
  install(TARGETS ncclsim-run ncclsim-fabric train_job RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
          COMPONENT sim)
endif()
