"""healerd: keeps the containers declared in /etc/healerd running on the local Docker engine."""

__version__ = "0.1.0"
