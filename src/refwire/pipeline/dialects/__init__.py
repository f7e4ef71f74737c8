"""The pipeline's per-protocol parts: one module per protocol, its *dialect*.

Each module holds what the pipeline needs to know about one protocol's bytes:
its capture decoder ``decode(chunks, direction, peer=None)`` (see
:mod:`refwire.pipeline.decoders`) and its capture rules ``RULES`` (a list of
:class:`refwire.pipeline.rulekit.Rule`; see :mod:`refwire.pipeline.rules`).
Nothing in the rest of the pipeline names a protocol: it finds these through
the protocol's descriptor (:mod:`refwire.protocols`, the ``decoder`` and
``rules`` pieces), so adding a protocol to the pipeline is one module here
plus two lines in its descriptor.

``lumberjack``, ``pravega``, ``pravega_draft`` (the 2017 draft, which shares
:func:`~refwire.pipeline.dialects.pravega.command_fields`; no rules yet),
``tank`` and ``seastar_rpc``.  The modules import their protocol's codec only
inside the functions that decode, so importing one for its rules (as Spark
workers do to unpickle a pure check) stays cheap.
"""
