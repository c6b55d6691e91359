// Asks MM2's own RemoteClusterUtils about a cluster, so tests can compare what mirrorflow wrote with what
// Kafka's client library reads from it.
//   translate BOOTSTRAP SOURCE_ALIAS GROUP   one line per partition: topic<TAB>partition<TAB>offset
//   upstream BOOTSTRAP                       one line per upstream cluster alias
//   hops BOOTSTRAP ALIAS                     the replication hops to that alias
// With the environment variable ORACLE_CLIENT_PROPERTIES naming a file, its client settings are added.
import java.io.FileReader;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class RemoteClusterOracle {
    public static void main(String[] args) throws Exception {
        Map<String, Object> props = new HashMap<>(Map.of("bootstrap.servers", args[1]));
        String extra = System.getenv("ORACLE_CLIENT_PROPERTIES");
        if (extra != null) {
            Properties file = new Properties();
            try (FileReader in = new FileReader(extra)) {
                file.load(in);
            }
            file.forEach((k, v) -> props.put((String) k, v));
        }
        switch (args[0]) {
            case "translate" -> {
                Map<TopicPartition, OffsetAndMetadata> offsets =
                    RemoteClusterUtils.translateOffsets(props, args[2], args[3], Duration.ofSeconds(60));
                Map<String, Long> sorted = new TreeMap<>();
                offsets.forEach((tp, om) -> sorted.put(tp.topic() + "\t" + tp.partition(), om.offset()));
                sorted.forEach((tp, offset) -> System.out.println(tp + "\t" + offset));
            }
            case "upstream" -> RemoteClusterUtils.upstreamClusters(props).stream().sorted()
                .forEach(System.out::println);
            case "hops" -> System.out.println(RemoteClusterUtils.replicationHops(props, args[2]));
            default -> throw new IllegalArgumentException("unknown mode " + args[0]);
        }
    }
}
