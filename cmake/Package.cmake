# Debian packages through CPack: `cpack -G DEB` in the build folder writes one package per install
# component (cmake/Install.cmake), installing under /usr:
#   autoha       /usr/lib/libautoha.so, /usr/bin/autoha
#   autoha-sim   sim/'s stand-ins in /usr/lib/autoha-sim and ncclsim-run, ncclsim-fabric, train_job
# Their dependencies on Debian's packages are found by dpkg-shlibdeps (package dpkg-dev), and the
# one it cannot see is named: libautoha.so and autoha open libjansson.so.4 with dlopen
# (tuner/ah_jansson.c), so autoha Depends on libjansson4 (dpkg-shlibdeps' findings are added to it).
# libcurl.so.4 is opened the same way, but only by a job given AUTOHA_ETCD (cluster/ah_cluster_curl.c),
# so autoha Suggests libcurl4 rather than depending on it.
# The packaged binaries are stripped and their debug info ships apart, Debian's way: each package
# gets a -dbgsym one (autoha-dbgsym, autoha-sim-dbgsym; .ddeb files beside the .deb) holding
# /usr/lib/debug/.build-id/XX/YYYY.debug, which gdb finds through the binary's build ID.
# CPACK_DEBIAN_DEBUGINFO_PACKAGE does the splitting itself (objcopy --only-keep-debug, then
# --strip-unneeded and a debuglink), and only on files `file` calls "not stripped", so
# CPACK_STRIP_FILES must stay off: it would strip first and leave nothing to split out. The debug
# info is what the build made: RelWithDebInfo, the default build type (CMakeLists.txt), has it.
set(CPACK_PACKAGE_NAME autoha)
set(CPACK_PACKAGE_VENDOR autoha)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "LD_PRELOAD tuner for NCCL collectives")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL autoha)
if(AUTOHA_BUILD_SIM)
  list(APPEND CPACK_COMPONENTS_ALL sim)
endif()
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "autoha developers <autoha@localhost>")
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_DEBUGINFO_PACKAGE ON)
set(CPACK_DEBIAN_AUTOHA_PACKAGE_NAME autoha)
set(CPACK_DEBIAN_AUTOHA_PACKAGE_DEPENDS libjansson4)
set(CPACK_DEBIAN_AUTOHA_PACKAGE_SUGGESTS libcurl4)
set(CPACK_DEBIAN_SIM_PACKAGE_NAME autoha-sim)
set(CPACK_COMPONENT_AUTOHA_DESCRIPTION "libautoha.so, preloaded into NCCL jobs to tune their collectives, and the autoha command")
set(CPACK_COMPONENT_SIM_DESCRIPTION "sim/: CPU stand-ins for libnccl, CUDA and libibverbs, to run NCCL programs without GPUs")
# libncclsim.so and the verbs stand-ins are private to autoha-sim: dpkg-shlibdeps must not look for
# a Debian package providing them.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR}/simlib)
include(CPack)
