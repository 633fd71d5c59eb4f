"""Test support shared by tests/integration, tests/chaos and bench/ (one copy of each):

- dockerd.py: a private dockerd (own socket, data and exec roots, bridge and subnet):
  start, stop, restart, kill, teardown, and reaping what runs that died left behind;
- chrootdockerd.py: the same for Debian 13's dockerd 26.1, run from a cached Debian 13
  root (HEALERD_TEST_ENGINE=docker26, engines.py);
- healerd_process.py: healerd as a subprocess with a config dir of its own;
- config.py: that config dir (healerd.yaml, conf.d/ service files, atomic or in place);
- cluster.py: healerd's containers on an engine, by service;
- polling.py: wait_for and holds_for (deadlines, never a bare sleep);
- processes.py: terminating children, and pids from pidfiles checked before a signal;
- busybox_image.py: the local busybox image (no registry) and the containers' command;
- compose_oracle.py: the `docker-compose` the differential tests compare with (v1 or
  Debian 13's v2; HEALERD_TEST_COMPOSE names another) and what v2 spells differently.

The shell scripts beside them (engine.sh, venv.sh, run-example.sh) set up a machine.
"""
