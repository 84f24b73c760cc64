"""The methods: one subpackage per paper (or family), each declaring its methods in its
`__init__.py` (`DECLARATIONS`, torch-free; see `fedhet.declare`) beside their implementation.
`fedhet.catalog` finds them; nothing here imports an implementation."""
