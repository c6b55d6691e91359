// Reads topic names (one per line, UTF-8) and prints what MM2's own DefaultReplicationPolicy and
// IdentityReplicationPolicy answer for each, tab separated, so the Python policies can be compared.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.kafka.connect.mirror.DefaultReplicationPolicy;
import org.apache.kafka.connect.mirror.IdentityReplicationPolicy;
import org.apache.kafka.connect.mirror.ReplicationPolicy;

public class PolicyOracle {
    public static void main(String[] args) throws Exception {
        String separator = args.length > 0 ? args[0] : ".";
        DefaultReplicationPolicy byDefault = new DefaultReplicationPolicy();
        byDefault.configure(Map.of("replication.policy.separator", separator));
        IdentityReplicationPolicy identity = new IdentityReplicationPolicy();
        identity.configure(Map.of("replication.policy.separator", separator));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String topic;
        while ((topic = in.readLine()) != null) {
            System.out.println(String.join("\t", answers(byDefault, topic)) + "\t"
                + String.join("\t", answers(identity, topic)));
        }
    }

    static String[] answers(ReplicationPolicy p, String topic) {
        return new String[] {
            p.formatRemoteTopic("src", topic), String.valueOf(p.topicSource(topic)),
            String.valueOf(p.upstreamTopic(topic)), p.originalTopic(topic),
            String.valueOf(p.isInternalTopic(topic)), String.valueOf(p.isHeartbeatsTopic(topic)),
        };
    }
}
