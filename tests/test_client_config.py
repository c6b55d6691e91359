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
    assert dropped == ["buffer.memory", "key.serializer", "ssl.truststore.type"]


def test_a_jks_truststore_is_an_error_saying_how_to_convert() -> None:
    with pytest.raises(ConfigError, match="convert it to PEM"):
        to_librdkafka({"ssl.truststore.location": "/t.jks"}, cluster="A")


def test_jaas_credentials_only_for_plain_and_scram() -> None:
    assert jaas_credentials('x.PlainLoginModule required username="a" password="b";') == ("a", "b")
    assert jaas_credentials("x.OAuthBearerLoginModule required;") is None
