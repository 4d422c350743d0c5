"""Wire codec and bridge SDK, shipped with the server and alone as ``duplex-mpe-client``."""

# Version of the client-only distribution (client-dist/): the major number is the wire
# protocol version (codec.PROTOCOL_VERSION, DESIGN §4); tests/test_client_dist.py checks it.
__version__ = "1.0.0"
