package refwire.peers;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.netty.channel.ChannelHandlerContext;
import java.io.BufferedWriter;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;
import org.logstash.beats.IMessageListener;
import org.logstash.beats.Message;
import org.logstash.beats.Server;

/**
 * Logstash's Beats input (org.logstash.beats.Server, the plugin's Java side) as a
 * program, for refwire's tests against the real implementation.  The plugin's
 * Ruby listener is replaced by {@link Sink}: each event's JSON is written to
 * --out as one line, flushed, before the listener returns (the ack of a batch
 * goes out after the listener returned for its highest sequence number);
 * --ack-delay-ms sleeps there first.
 *
 * <pre>
 *   BeatsInputPeer --port N [--host 127.0.0.1] [--out FILE] [--ack-delay-ms MS]
 *                  [--client-inactivity-timeout S] [--executor-threads N] [--event-loop-threads N]
 *                  [--max-string-length N] [--max-number-length N]
 * </pre>
 */
public final class BeatsInputPeer {
    private static final Logger logger = LogManager.getLogger(BeatsInputPeer.class);

    public static void main(String[] args) throws Exception {
        String host = "127.0.0.1";
        int port = -1;
        String out = null;
        long ackDelayMs = 0;
        // The plugin's defaults: client_inactivity_timeout 60, event_loop_threads 0 (Netty's
        // choice), executor_threads = the number of cores.
        int inactivity = 60;
        int eventLoopThreads = 0;
        int executorThreads = Runtime.getRuntime().availableProcessors();
        // Logstash's jvm.options: logstash.jackson.stream-read-constraints.max-string-length
        // 200000000 and max-number-length 10000 (Jackson's own defaults are 20000000 and 1000).
        int maxStringLength = 200_000_000;
        int maxNumberLength = 10_000;
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            String v = i + 1 < args.length ? args[i + 1] : null;
            if (v == null) usage("missing value for " + a);
            switch (a) {
                case "--host": host = v; break;
                case "--port": port = Integer.parseInt(v); break;
                case "--out": out = v; break;
                case "--ack-delay-ms": ackDelayMs = Long.parseLong(v); break;
                case "--client-inactivity-timeout": inactivity = Integer.parseInt(v); break;
                case "--executor-threads": executorThreads = Integer.parseInt(v); break;
                case "--event-loop-threads": eventLoopThreads = Integer.parseInt(v); break;
                case "--max-string-length": maxStringLength = Integer.parseInt(v); break;
                case "--max-number-length": maxNumberLength = Integer.parseInt(v); break;
                default: usage("unknown option " + a);
            }
            i++;
        }
        if (port <= 0) usage("--port N is required");

        // Before org.logstash.beats.Message (its static ObjectMapper) is loaded: the
        // constraints are taken from the defaults when a JsonFactory is made.
        logger.info("jackson: {}", applyStreamReadConstraints(maxStringLength, maxNumberLength));

        Writer sink = out == null ? null
                : new BufferedWriter(new OutputStreamWriter(new FileOutputStream(out, true), StandardCharsets.UTF_8), 1 << 16);
        Server server = new Server("refwire-beats", host, port, inactivity, eventLoopThreads, executorThreads);
        server.setMessageListener(new Sink(sink, ackDelayMs));
        // No shutdown hook: the server's threads are daemons and every event is flushed
        // before its ack, so SIGTERM ends the process at once (Server.stop() would wait
        // for Netty's graceful shutdown, seconds per thread group).
        logger.info("serving {}:{} (client inactivity timeout {} s, {} executor threads, ack delay {} ms)",
                host, port, inactivity, executorThreads, ackDelayMs);
        server.listen();  // returns when the server channel closes
    }

    /**
     * StreamReadConstraints.overrideDefaultStreamReadConstraints as Logstash does, when the
     * jackson-core on the class path has the API (2.15 and later); a description of what applies.
     */
    static String applyStreamReadConstraints(int maxStringLength, int maxNumberLength) {
        String version = com.fasterxml.jackson.core.json.PackageVersion.VERSION.toString();
        Class<?> constraints;
        try {
            constraints = Class.forName("com.fasterxml.jackson.core.StreamReadConstraints");
        } catch (ClassNotFoundException e) {
            return "jackson-core " + version + " has no StreamReadConstraints (added in 2.15): "
                    + "no limit on string or number length";
        }
        try {
            Object builder = constraints.getMethod("builder").invoke(null);
            Method strings = builder.getClass().getMethod("maxStringLength", int.class);
            Method numbers = builder.getClass().getMethod("maxNumberLength", int.class);
            builder = numbers.invoke(strings.invoke(builder, maxStringLength), maxNumberLength);
            Object built = builder.getClass().getMethod("build").invoke(builder);
            constraints.getMethod("overrideDefaultStreamReadConstraints", constraints).invoke(null, built);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("jackson-core " + version + ": cannot set StreamReadConstraints", e);
        }
        return "jackson-core " + version + " StreamReadConstraints: maxStringLength " + maxStringLength
                + ", maxNumberLength " + maxNumberLength;
    }

    private static void usage(String why) {
        System.err.println("BeatsInputPeer: " + why);
        System.err.println("usage: BeatsInputPeer --port N [--host H] [--out FILE] [--ack-delay-ms MS] "
                + "[--client-inactivity-timeout S] [--executor-threads N] [--event-loop-threads N] "
                + "[--max-string-length N] [--max-number-length N]");
        System.exit(2);
    }

    /** The application: each event to the sink before the listener returns. */
    static final class Sink implements IMessageListener {
        private final Writer out;
        private final long ackDelayMs;
        private final ObjectMapper mapper = new ObjectMapper();

        Sink(Writer out, long ackDelayMs) {
            this.out = out;
            this.ackDelayMs = ackDelayMs;
        }

        @Override
        public void onNewMessage(ChannelHandlerContext ctx, Message message) {
            // As the plugin's listener does first: a payload that is no JSON object throws
            // here, and the handler closes the connection.
            Map<?, ?> data = message.getData();
            if (out != null) {
                try {
                    String line = mapper.writeValueAsString(data);
                    synchronized (out) {
                        out.write(line);
                        out.write('\n');
                        out.flush();
                    }
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            }
            if (ackDelayMs > 0 && message.getSequence() == message.getBatch().getHighestSequence()) {
                try {
                    Thread.sleep(ackDelayMs);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        }

        @Override
        public void onNewConnection(ChannelHandlerContext ctx) {
            logger.debug("connection from {}", ctx.channel().remoteAddress());
        }

        @Override
        public void onConnectionClose(ChannelHandlerContext ctx) {
            logger.debug("connection from {} closed", ctx.channel().remoteAddress());
        }

        @Override
        public void onException(ChannelHandlerContext ctx, Throwable cause) {
            logger.debug("exception on {}: {}", ctx.channel().remoteAddress(), cause.toString());
        }

        @Override
        public void onChannelInitializeException(ChannelHandlerContext ctx, Throwable cause) {
            logger.warn("channel initialisation failed: {}", cause.toString());
        }
    }
}
