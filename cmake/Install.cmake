# What `cmake --install build --prefix P` puts where (GNUInstallDirs), in two components:
#   autoha  P/lib/libautoha.so (the library users preload) and P/bin/autoha (the command line)
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
