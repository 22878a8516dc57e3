"""The lab's certificate authority, serving and client certificates, and kubeconfigs.

Every component gets its own identity, as in a real cluster, so that the apiserver's Node
and RBAC authorizers apply to them: nodes are ``system:node:NAME`` in ``system:nodes``,
kube-proxy is ``system:kube-proxy``, and so on. ECDSA keys keep generation fast.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=30)


@dataclass(frozen=True)
class Identity:
    """Who a client certificate says it is."""

    name: str
    user: str
    groups: tuple[str, ...] = ()


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class Pki:
    """Creates and holds the lab's keys and certificates in one directory."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        now = dt.datetime.now(dt.UTC)
        self._not_before = now - dt.timedelta(minutes=5)
        self._ca_key = _key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lbconform-lab-ca")])
        self._ca_name = name
        self._ca = (
            x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before).not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
            )
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca_file.write_bytes(self._ca.public_bytes(serialization.Encoding.PEM))
        sa_key = _key()
        self.sa_key_file.write_bytes(_pem_key(sa_key))
        self.sa_pub_file.write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    @property
    def ca_file(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def sa_key_file(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub_file(self) -> Path:
        return self.dir / "sa.pub"

    def _issue(
        self, stem: str, subject: x509.Name, usage: x509.ObjectIdentifier,
        sans: list[x509.GeneralName] | None = None,
    ) -> tuple[Path, Path]:
        key = _key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(self._ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(self._not_before + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        crt, keyf = self.dir / f"{stem}.crt", self.dir / f"{stem}.key"
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        keyf.write_bytes(_pem_key(key))
        keyf.chmod(0o600)
        return crt, keyf

    def serving(self, stem: str, dns: list[str], ips: list[str]) -> tuple[Path, Path]:
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, stem)])
        return self._issue(stem, subject, ExtendedKeyUsageOID.SERVER_AUTH, sans)

    def client(self, who: Identity) -> tuple[Path, Path]:
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in who.groups]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, who.user))
        return self._issue(who.name, x509.Name(attrs), ExtendedKeyUsageOID.CLIENT_AUTH)

    def kubeconfig(self, path: Path, who: Identity, server: str) -> Path:
        """Write a kubeconfig for ``who`` against ``server`` (certificates referenced by path)."""
        crt, key = self.client(who)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "lbconform-lab", "cluster": {
                "server": server, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": who.user, "user": {
                "client-certificate": str(crt), "client-key": str(key)}}],
            "contexts": [{"name": "lbconform-lab", "context": {
                "cluster": "lbconform-lab", "user": who.user}}],
            "current-context": "lbconform-lab",
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path
