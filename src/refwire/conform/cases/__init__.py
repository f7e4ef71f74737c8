"""The conformance catalogues, one package per protocol (``cases/<protocol>/``),
each found through its protocol's descriptor (``Descriptor.conform``): the cases,
their expectations and the profiles of the real implementations they name."""
