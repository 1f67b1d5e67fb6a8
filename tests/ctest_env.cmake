# Included by ctest before it runs any test (the top directory's TEST_INCLUDE_FILES): the tests'
# common environment, which every test process inherits. Every hub a test starts binds loopback
# (autoha's hub otherwise binds the host's first non-loopback address, as a multi-node job needs):
# no test's traffic leaves 127.0.0.0/8. A test that checks the interface choice sets its own.
set(ENV{AUTOHA_COORD_IFNAME} lo)
