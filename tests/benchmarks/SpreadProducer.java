import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Kafka's own producer writing records round robin over every partition of topics {prefix}0000.., 12 partitions each:
 * what the brokers take from a client that puts many partitions in one request (bench-scale's brokers' intake).
 *
 * <p>Arguments: bootstrap servers, topic prefix, topics, partitions per topic, records, record bytes. Prints
 * {@code java_produce_rps=N failed=N}.
 */
public final class SpreadProducer {
    public static void main(String[] args) throws Exception {
        String prefix = args[1];
        int topics = Integer.parseInt(args[2]);
        int perTopic = Integer.parseInt(args[3]);
        long records = Long.parseLong(args[4]);
        byte[] payload = new byte[Integer.parseInt(args[5])];
        Properties settings = new Properties();
        settings.put("bootstrap.servers", args[0]);
        settings.put("linger.ms", "50");
        settings.put("buffer.memory", String.valueOf(1L << 30));  // 16 KiB batches of 24,000 partitions: 375 MiB
        settings.put("delivery.timeout.ms", String.valueOf(Integer.MAX_VALUE));
        String[] names = new String[topics];
        for (int t = 0; t < topics; t++) {
            names[t] = String.format("%s%04d", prefix, t);
        }
        AtomicLong failed = new AtomicLong();
        try (Producer<byte[], byte[]> producer =
                 new KafkaProducer<>(settings, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (String name : names) {
                producer.partitionsFor(name);  // metadata first: the timing is of the writes
            }
            long partitions = (long) topics * perTopic;
            long begun = System.nanoTime();
            for (long i = 0; i < records; i++) {
                int at = (int) (i % partitions);
                producer.send(new ProducerRecord<>(names[at / perTopic], at % perTopic, null, payload),
                              (metadata, error) -> {
                                  if (error != null) {
                                      failed.incrementAndGet();
                                  }
                              });
            }
            producer.flush();
            double seconds = (System.nanoTime() - begun) / 1e9;
            System.out.printf("java_produce_rps=%.0f failed=%d%n", records / seconds, failed.get());
        }
    }
}
