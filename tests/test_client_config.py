from __future__ import annotations

import pytest
from mirrorflow.errors import ConfigError
from mirrorflow.model.client_config import jaas_credentials, to_librdkafka


def test_java_client_keys_become_librdkafka_keys() -> None:
    out, dropped = to_librdkafka({
        "bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="u" password="p\\"q";',
        "max.request.size": "2000000", "key.serializer": "x", "buffer.memory": "1",
        "ssl.truststore.location": "/ca.pem", "ssl.truststore.type": "PEM"})
    assert out == {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL",
                   "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": 'p\\"q',
                   "message.max.bytes": "2000000", "ssl.ca.location": "/ca.pem"}
    assert dropped == ["buffer.memory", "key.serializer"]


def test_pem_stores_are_named_by_path_or_inline_and_java_s_empty_host_check_is_librdkafka_s_none() -> None:
    out, _ = to_librdkafka({"ssl.keystore.location": "/id.pem", "ssl.keystore.type": "PEM",
                            "ssl.key.password": "k", "ssl.endpoint.identification.algorithm": ""})
    assert out == {"ssl.certificate.location": "/id.pem", "ssl.key.location": "/id.pem", "ssl.key.password": "k",
                   "ssl.endpoint.identification.algorithm": "none"}
    out, _ = to_librdkafka({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": "CA",
                            "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": "CHAIN",
                            "ssl.keystore.key": "KEY"})
    assert out == {"ssl.ca.pem": "CA", "ssl.certificate.pem": "CHAIN", "ssl.key.pem": "KEY"}


def test_a_java_store_without_an_opener_or_of_an_unknown_type_is_an_error_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"^A\.ssl\.truststore\.location: a JKS truststore needs Java's keytool"):
        to_librdkafka({"ssl.truststore.location": "/t.jks"}, cluster="A")
    with pytest.raises(ConfigError, match=r"^A\.ssl\.keystore\.type: a BKS keystore cannot be opened"):
        to_librdkafka({"ssl.keystore.location": "/k.bks", "ssl.keystore.type": "bks"}, cluster="A")


def test_jaas_credentials_only_for_plain_and_scram() -> None:
    assert jaas_credentials('x.PlainLoginModule required username="a" password="b";') == ("a", "b")
    assert jaas_credentials("x.OAuthBearerLoginModule required;") is None
