import java.io.IOException;
import java.math.BigDecimal;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Timestamp;
import java.time.Duration;
import java.time.LocalDate;
import java.time.OffsetDateTime;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import javax.jms.JMSException;
import javax.jms.MessageConsumer;
import javax.jms.MessageListener;
import javax.jms.Session;

import org.apache.activemq.ActiveMQConnectionFactory;
import org.apache.activemq.RedeliveryPolicy;

/**
 * What both invoice beans share, in the shape a JEE container would give them:
 * the environment (data source, queue, letter service URL, redelivery policy),
 * the event parser, the customer lookup, the two business inserts and the
 * letter-service HTTP client. The beans themselves hold the behaviour under test.
 */
final class InvoiceSupport {
    private InvoiceSupport() {}

    static String env(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            System.err.println("missing environment variable " + name + " (the golden black-box recorder sets it)");
            System.exit(2);
        }
        return v;
    }

    static void log(String msg) {
        System.err.println("[" + System.getenv().getOrDefault("INBOXKIT_INSTANCE", "?") + "] " + msg);
    }

    /** The container: a transacted JMS session over OpenWire with ActiveMQ's client redelivery policy. */
    interface Bean extends MessageListener {
        void init(Session session);
    }

    /**
     * Runs the bean until the process is killed. A bean that cannot start exits with status 1,
     * as a container does: the ActiveMQ client's threads, started by a connection that failed
     * afterwards, would otherwise keep the JVM alive after main threw.
     */
    static void run(Bean bean) {
        try {
            serve(bean);
        } catch (Throwable e) {
            e.printStackTrace();
            System.exit(1);
        }
    }

    private static void serve(Bean bean) throws Exception {
        ActiveMQConnectionFactory cf = new ActiveMQConnectionFactory(env("INBOXKIT_OPENWIRE_URL"));
        RedeliveryPolicy p = cf.getRedeliveryPolicy();
        p.setMaximumRedeliveries(Integer.parseInt(env("INBOXKIT_MAX_REDELIVERIES")));
        p.setInitialRedeliveryDelay(100);
        p.setRedeliveryDelay(100);
        p.setUseExponentialBackOff(false);
        cf.getPrefetchPolicy().setQueuePrefetch(1);
        javax.jms.Connection conn = cf.createConnection();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try { conn.close(); } catch (JMSException e) { /* exiting */ }
        }));
        Session session = conn.createSession(true, Session.SESSION_TRANSACTED);
        bean.init(session);
        MessageConsumer consumer = session.createConsumer(session.createQueue(env("INBOXKIT_QUEUE")));
        consumer.setMessageListener(bean);
        conn.start();
        log(bean.getClass().getSimpleName() + " listening on " + env("INBOXKIT_QUEUE"));
        Thread.currentThread().join();
    }

    static java.sql.Connection db() throws SQLException {
        java.sql.Connection c = DriverManager.getConnection(env("INBOXKIT_JDBC_URL"));
        c.setAutoCommit(false);
        return c;
    }

    /** A business rule violation (the "after" bean rejects these; the legacy bean throws them like any other). */
    static final class BusinessException extends Exception {
        final String code;
        BusinessException(String code, String msg) { super(msg); this.code = code; }
    }

    static final class InvoiceEvent {
        String invoiceNo, customerNo, amount, currency, issuedAt;
    }

    /** Parses {"invoiceNo":"..","customerNo":"..","amount":"..","currency":"..","issuedAt":".."}: a flat object of strings. */
    static InvoiceEvent parse(String body) throws BusinessException {
        Map<String, String> m = new LinkedHashMap<>();
        int[] pos = {0};
        try {
            skipWs(body, pos);
            expect(body, pos, '{');
            skipWs(body, pos);
            if (peek(body, pos) == '}') {
                pos[0]++;
            } else {
                while (true) {
                    skipWs(body, pos);
                    String k = string(body, pos);
                    skipWs(body, pos);
                    expect(body, pos, ':');
                    skipWs(body, pos);
                    m.put(k, string(body, pos));
                    skipWs(body, pos);
                    char c = next(body, pos);
                    if (c == '}') break;
                    if (c != ',') throw new IllegalArgumentException("expected , or } at " + (pos[0] - 1));
                }
            }
            skipWs(body, pos);
            if (pos[0] != body.length()) throw new IllegalArgumentException("data after the JSON object");
        } catch (IllegalArgumentException | StringIndexOutOfBoundsException e) {
            throw new BusinessException("MALFORMED_PAYLOAD", "cannot parse InvoiceCreated: " + e.getMessage());
        }
        InvoiceEvent ev = new InvoiceEvent();
        ev.invoiceNo = m.get("invoiceNo");
        ev.customerNo = m.get("customerNo");
        ev.amount = m.get("amount");
        ev.currency = m.get("currency");
        ev.issuedAt = m.get("issuedAt");
        StringBuilder missing = new StringBuilder();
        String[][] fields = {{"invoiceNo", ev.invoiceNo}, {"customerNo", ev.customerNo}, {"amount", ev.amount}, {"currency", ev.currency}, {"issuedAt", ev.issuedAt}};
        for (String[] f : fields) {
            if (f[1] == null || f[1].trim().isEmpty()) missing.append(missing.length() == 0 ? "" : ", ").append(f[0]);
        }
        if (missing.length() > 0) throw new BusinessException("MISSING_FIELD", "missing " + missing);
        try {
            new BigDecimal(ev.amount.trim());
        } catch (NumberFormatException e) {
            throw new BusinessException("MALFORMED_PAYLOAD", "amount " + ev.amount + " is not a decimal number");
        }
        try {
            LocalDate.parse(ev.issuedAt);
        } catch (RuntimeException e) {
            try {
                OffsetDateTime.parse(ev.issuedAt);
            } catch (RuntimeException e2) {
                throw new BusinessException("MALFORMED_PAYLOAD", "issuedAt " + ev.issuedAt + " is not a date");
            }
        }
        return ev;
    }

    private static char peek(String s, int[] p) { return s.charAt(p[0]); }
    private static char next(String s, int[] p) { return s.charAt(p[0]++); }
    private static void skipWs(String s, int[] p) { while (p[0] < s.length() && Character.isWhitespace(s.charAt(p[0]))) p[0]++; }
    private static void expect(String s, int[] p, char c) {
        if (next(s, p) != c) throw new IllegalArgumentException("expected " + c + " at " + (p[0] - 1));
    }
    private static String string(String s, int[] p) {
        expect(s, p, '"');
        StringBuilder b = new StringBuilder();
        while (true) {
            char c = next(s, p);
            if (c == '"') return b.toString();
            if (c == '\\') {
                char e = next(s, p);
                switch (e) {
                    case 'n': b.append('\n'); break;
                    case 't': b.append('\t'); break;
                    case 'r': b.append('\r'); break;
                    case 'b': b.append('\b'); break;
                    case 'f': b.append('\f'); break;
                    case 'u': b.append((char) Integer.parseInt(s.substring(p[0], p[0] + 4), 16)); p[0] += 4; break;
                    default: b.append(e);
                }
            } else {
                b.append(c);
            }
        }
    }

    static final class Customer { String no, name, address; }

    static Customer customer(java.sql.Connection db, String no) throws SQLException, BusinessException {
        try (PreparedStatement ps = db.prepareStatement("SELECT name, address FROM invoice_customers WHERE customer_no = ?")) {
            ps.setString(1, no);
            try (ResultSet rs = ps.executeQuery()) {
                if (!rs.next()) throw new BusinessException("CUSTOMER_UNKNOWN", "customer " + no + " not found");
                Customer c = new Customer();
                c.no = no;
                c.name = rs.getString(1);
                c.address = rs.getString(2);
                return c;
            }
        }
    }

    static final List<String> CURRENCIES = List.of("CHF", "EUR", "GBP", "USD");

    static void checkRules(InvoiceEvent ev) throws BusinessException {
        if (new BigDecimal(ev.amount.trim()).signum() <= 0) throw new BusinessException("INVALID_AMOUNT", "amount " + ev.amount + " is not positive");
        if (!CURRENCIES.contains(ev.currency.toUpperCase())) throw new BusinessException("CURRENCY_UNSUPPORTED", "currency " + ev.currency + " not supported");
    }

    static final class Letter {
        String letterId = UUID.randomUUID().toString();
        String invoiceNo, customerNo, name, address, amount, currency, eventId;
    }

    static Letter letter(InvoiceEvent ev, Customer c, String eventId) {
        Letter l = new Letter();
        l.invoiceNo = ev.invoiceNo;
        l.customerNo = c.no;
        l.name = c.name;
        l.address = c.address;
        l.amount = ev.amount;
        l.currency = ev.currency.toUpperCase();
        l.eventId = eventId;
        return l;
    }

    private static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    /** POST INBOXKIT_LETTER_SERVICE with the letter as JSON; any answer but 2xx is an IOException. */
    static void sendLetter(Letter l, String idempotencyKey) throws IOException, InterruptedException {
        String json = "{" + jf("letterId", l.letterId) + "," + jf("invoiceNo", l.invoiceNo) + "," + jf("customerNo", l.customerNo)
                + "," + jf("name", l.name) + "," + jf("address", l.address) + "," + jf("amount", l.amount)
                + "," + jf("currency", l.currency) + "," + jf("eventId", l.eventId) + "}";
        HttpRequest.Builder rb = HttpRequest.newBuilder(URI.create(env("INBOXKIT_LETTER_SERVICE")))
                .timeout(Duration.ofSeconds(30))
                .header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(json));
        if (idempotencyKey != null) rb.header("Idempotency-Key", idempotencyKey);
        HttpResponse<String> r = HTTP.send(rb.build(), HttpResponse.BodyHandlers.ofString());
        if (r.statusCode() / 100 != 2) throw new IOException("letter service answered " + r.statusCode() + ": " + r.body().trim());
    }

    private static String jf(String k, String v) {
        if (v == null) return "\"" + k + "\":null";
        StringBuilder b = new StringBuilder("\"").append(k).append("\":\"");
        for (char c : v.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static void insertLetter(java.sql.Connection db, Letter l, Timestamp now) throws SQLException {
        try (PreparedStatement ps = db.prepareStatement("INSERT INTO shipping_letters (letter_id, invoice_no, customer_no, event_id, created_at) VALUES (?, ?, ?, ?, ?)")) {
            ps.setString(1, l.letterId);
            ps.setString(2, l.invoiceNo);
            ps.setString(3, l.customerNo);
            ps.setString(4, l.eventId);
            ps.setTimestamp(5, now);
            ps.executeUpdate();
        }
    }

    static void archive(java.sql.Connection db, String invoiceNo, String payload, Timestamp now) throws SQLException {
        try (PreparedStatement ps = db.prepareStatement("INSERT INTO archived_documents (document_id, invoice_no, payload, created_at) VALUES (?, ?, ?, ?)")) {
            ps.setString(1, UUID.randomUUID().toString());
            ps.setString(2, invoiceNo);
            ps.setString(3, payload);
            ps.setTimestamp(4, now);
            ps.executeUpdate();
        }
    }
}
