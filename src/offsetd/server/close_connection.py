"""What the request path (dispatch, the SASL exchange) raises for input so bad that the connection
must close; the connection closes itself, saying why in the log."""


class CloseConnection(Exception):
    """Raised by dispatch when the request is so bad the connection must be closed."""
