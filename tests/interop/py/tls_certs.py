"""Test certificates made with the openssl CLI: a CA, a server certificate for localhost and
127.0.0.1, a client certificate signed by the CA, and a client certificate from another CA
(which a verifying broker must refuse). Run as a script to write them to a directory:
    python tls_certs.py DIR
"""
import os
import subprocess
import sys
import time

CLIENT_SUBJECT = "/C=GB/O=Warren Tests/CN=tls-client"
# What RabbitMQ's ssl_cert_login_from = distinguished_name makes of CLIENT_SUBJECT (RFC 4514:
# RDNs in reverse order).
CLIENT_DN = "CN=tls-client,O=Warren Tests,C=GB"
CLIENT_CN = "tls-client"


def _openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _key(path):
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path)


def _ca(d, name, subject):
    key, cert = os.path.join(d, name + ".key"), os.path.join(d, name + ".pem")
    _key(key)
    _openssl("req", "-x509", "-new", "-key", key, "-out", cert, "-days", "2", "-subj", subject,
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return key, cert


def _leaf(d, name, subject, ca_key, ca_cert, extensions):
    key, csr, cert = (os.path.join(d, name + ext) for ext in (".key", ".csr", ".pem"))
    ext_file = os.path.join(d, name + ".ext")
    with open(ext_file, "w") as f:
        f.write("\n".join(["basicConstraints=CA:FALSE", *extensions]) + "\n")
    _key(key)
    _openssl("req", "-new", "-key", key, "-out", csr, "-subj", subject)
    _openssl("x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key, "-CAcreateserial",
             "-out", cert, "-days", "2", "-extfile", ext_file)
    return cert, key


def make(d):
    """Writes the certificates into directory d and returns their paths by role."""
    os.makedirs(d, exist_ok=True)
    ca_key, ca_cert = _ca(d, "ca", "/CN=Warren Test CA")
    other_key, other_cert = _ca(d, "other_ca", "/CN=Another CA")
    server = _leaf(d, "server", "/CN=localhost", ca_key, ca_cert,
                   ["subjectAltName=DNS:localhost,IP:127.0.0.1", "extendedKeyUsage=serverAuth"])
    client = _leaf(d, "client", CLIENT_SUBJECT, ca_key, ca_cert, ["extendedKeyUsage=clientAuth"])
    stranger = _leaf(d, "stranger", CLIENT_SUBJECT, other_key, other_cert,
                     ["extendedKeyUsage=clientAuth"])
    for path in os.listdir(d):
        os.chmod(os.path.join(d, path), 0o644)  # RabbitMQ runs as its own user
    return {"ca": ca_cert, "server": server, "client": client, "stranger": stranger}


if __name__ == "__main__":
    print(make(sys.argv[1]))


def read_until_closed(sock, limit_s):
    """Everything the server sends until it closes; fails if it is still open after limit_s."""
    sock.settimeout(limit_s)
    got = b""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk
    raise AssertionError("the server kept the connection open for %.0f s" % limit_s)
