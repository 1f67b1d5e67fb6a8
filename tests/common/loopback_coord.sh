# Sourced (through e2e_env.sh) by the e2e scripts that run the shim in tune mode: the coordinator's
# hub listens on a free loopback port, so no test traffic leaves 127.0.0.1 (by default the hub binds
# the host's first non-loopback address, which a multi-node job needs and a test must not use).
if [ -z "${AUTOHA_COORD_ADDR:-}" ]; then
  AUTOHA_COORD_ADDR=127.0.0.1:$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  export AUTOHA_COORD_ADDR
fi
