"""Data only: each protocol's spec (README.md) and vectors, shipped in the wheel as
``refwire._specs``; read them through :mod:`refwire.specs`."""
