"""The parts of pyinfra remedy uses that pyinfra does not document, each with why.

Tested against the pyinfra versions pinned in pyproject.toml (3.10). Nothing else in
remedy reaches into pyinfra's internals: a pyinfra upgrade that changes one of these
breaks here, in one place.

=============================================  ========================================
what                                           why
=============================================  ========================================
``state.get_op_data_for_host(host,             what a step says (remedy.operations.said)
host.current_op_hash).operation_meta``         goes on its own pyinfra result: the
                                               operation being executed is only known
                                               by its hash on the host
an attribute on ``OperationMeta``              that result carries what the step said,
(``remedy_said``)                              for the outcome; pyinfra has no field for
                                               an operation's own data
``operation._inner``                           the function under ``@operation``: which
                                               run values (stop, flow) an operation
                                               takes, read from its signature
``OperationMeta._hash``                        a fleet's rollout gates each host's
                                               operations by their place in the run
``state.ops[host][op_hash]``                   the step journal waits for pyinfra to
                                               complete an operation's meta (its
                                               callbacks run just before)
=============================================  ========================================
"""

from __future__ import annotations

import inspect

SAID = "remedy_said"  # the attribute on an OperationMeta that holds what a step said


def current_meta(state, host):
    """The OperationMeta of the operation HOST executes now (None at prepare)."""
    if not state.is_executing or host.current_op_hash is None:
        return None
    return state.get_op_data_for_host(host, host.current_op_hash).operation_meta


def said_on(meta) -> dict:
    """What a step said, kept on its pyinfra result META (made on first use)."""
    if not hasattr(meta, SAID):
        setattr(meta, SAID, {})
    return getattr(meta, SAID)


def said_by(meta) -> dict:
    """A copy of what the step whose pyinfra result is META said."""
    return dict(getattr(meta, SAID, None) or {})


def takes(operation, name: str) -> bool:
    """Whether OPERATION (a pyinfra @operation) takes an argument NAME."""
    return name in inspect.signature(operation._inner).parameters


def op_hash(meta) -> str:
    """The hash of the operation whose result is META."""
    return meta._hash


def meta_in(state, host, op_hash_: str):
    """HOST's pyinfra result of the operation OP_HASH, as the state holds it (None)."""
    return state.ops.get(host, {}).get(op_hash_)
