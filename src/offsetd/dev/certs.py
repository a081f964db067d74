"""Test certificates for TLS listeners: `python -m offsetd.dev.certs DIR [--client NAME ...]`.

Writes into DIR a test CA (`ca.pem`), a broker certificate for localhost and 127.0.0.1 as PEM
(`broker.pem`: PKCS#8 key + chain, which Kafka's Java tools read too; `broker.key`/`broker.crt`
apart) and as a PKCS12 keystore (`broker.p12`, password `KEYSTORE_PASSWORD`), a PKCS12 truststore
(`truststore.p12`), and per client a certificate with CN=<name>,OU=clients,O=offsetd
(`<name>.crt`, `<name>.key`). For development only: the CA key is thrown away.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

KEYSTORE_PASSWORD = "offsetd-test"


@dataclass(frozen=True)
class CertFiles:
    """Where `write_certs` put everything."""

    directory: Path
    ca: Path
    broker_pem: Path
    broker_key: Path
    broker_cert: Path
    broker_p12: Path
    truststore_p12: Path
    clients: dict[str, tuple[Path, Path]]  # name -> (certificate, PKCS#8 key)


def _pkcs8(key_pem: bytes, password: str | None = None) -> bytes:
    """A private key re-serialised as PKCS#8 (encrypted with `password` if given)."""
    from cryptography.hazmat.primitives.serialization import (
        BestAvailableEncryption, Encoding, NoEncryption, PrivateFormat, load_pem_private_key)

    key = load_pem_private_key(key_pem, None)
    encryption = BestAvailableEncryption(password.encode()) if password else NoEncryption()
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, encryption)


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)
    return path


def write_certs(directory: Path, clients: dict[str, tuple[str, str]] | None = None,
                hosts: tuple[str, ...] = ("localhost", "127.0.0.1")) -> CertFiles:
    """Create the CA, the broker's certificate and the clients' ones in `directory`;
    `clients` maps a file name to (CN, O), the OU is always `clients`."""
    import trustme
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, load_pem_private_key, pkcs12

    directory.mkdir(parents=True, exist_ok=True)
    clients = clients if clients is not None else {"alice": ("alice", "offsetd"), "bob": ("bob", "offsetd")}
    ca = trustme.CA(organization_name="offsetd", organization_unit_name="test CA")
    ca_pem = _write(directory / "ca.pem", ca.cert_pem.bytes())
    server = ca.issue_cert(*hosts, organization_name="offsetd", organization_unit_name="brokers")
    key = _pkcs8(server.private_key_pem.bytes())
    chain = b"".join(blob.bytes() for blob in server.cert_chain_pems)
    broker_key = _write(directory / "broker.key", key, private=True)
    broker_cert = _write(directory / "broker.crt", chain)
    broker_pem = _write(directory / "broker.pem", key + chain, private=True)
    certs = x509.load_pem_x509_certificates(chain)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    encryption = BestAvailableEncryption(KEYSTORE_PASSWORD.encode())
    p12 = pkcs12.serialize_key_and_certificates(b"broker", load_pem_private_key(key, None), certs[0],
                                                [*certs[1:], ca_cert], encryption)
    broker_p12 = _write(directory / "broker.p12", p12, private=True)
    trust = pkcs12.serialize_java_truststore([pkcs12.PKCS12Certificate(ca_cert, b"ca")], encryption)
    truststore_p12 = _write(directory / "truststore.p12", trust)
    client_files = {}
    for name, (common_name, organization) in clients.items():
        issued = ca.issue_cert(f"{name}.client", common_name=common_name, organization_name=organization,
                               organization_unit_name="clients")
        cert = _write(directory / f"{name}.crt", b"".join(blob.bytes() for blob in issued.cert_chain_pems))
        client_key = _write(directory / f"{name}.key", _pkcs8(issued.private_key_pem.bytes()), private=True)
        client_files[name] = (cert, client_key)
    return CertFiles(directory, ca_pem, broker_pem, broker_key, broker_cert, broker_p12, truststore_p12,
                     client_files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offsetd.dev.certs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--client", action="append", metavar="NAME",
                        help="a client certificate CN=NAME,OU=clients,O=offsetd (repeatable; default alice, bob, admin)")
    args = parser.parse_args(argv)
    names = args.client or ["alice", "bob", "admin"]
    files = write_certs(args.directory, {name: (name, "offsetd") for name in names})
    print(f"CA {files.ca}; broker {files.broker_pem} (PEM) and {files.broker_p12} (PKCS12, password "
          f"{KEYSTORE_PASSWORD}); clients: {', '.join(str(c) for c, _ in files.clients.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
