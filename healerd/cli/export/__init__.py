"""`healerctl export`: the declared services for another orchestrator (docs/export.md).

`command` runs the verb; `swarm`, `kubernetes` and `compose` render one target each
from what they share (`common`); `hostopts` and `attachments` put Compose's container
settings, secrets, links, addresses and GPUs into each target; `variables` keeps values
from `${VAR}` secret. This file imports nothing: `verbs` builds the parser on every
healerctl call, which must not load the config package.
"""
