"""Where healerd lives on a host by default. A module without imports: healerctl reads
these without loading the config package (a tenth of a second at every call)."""

from pathlib import Path

CONFIG_DIR = Path("/etc/healerd")
SOCKET = Path("/run/healerd/healerd.sock")
