import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Timestamp;

import javax.jms.JMSException;
import javax.jms.Message;
import javax.jms.Session;
import javax.jms.TextMessage;

/**
 * The design document's "after" bean: the legacy bean with an inbox table, as a
 * first refactoring often looks. It fixes the obvious (business errors are marked
 * REJECTED and acknowledged, processed events are skipped) and keeps two flaws the
 * black-box record must show:
 *
 * <ul>
 * <li>Check-then-act: {@code alreadyProcessed} is a SELECT before the work, so two
 *     instances that get the same event at the same time both pass it and both send
 *     the letter; the primary key only stops the second inbox row.</li>
 * <li>{@code markTechnicalFailure} writes TECHNICAL_FAILURE in the same transaction
 *     that the exception then rolls back: the mark (and any attempt count) is lost,
 *     and after the redelivery limit the message sits in DLQ.&lt;queue&gt; with no
 *     inbox row at all.</li>
 * </ul>
 */
public class InvoiceEventConsumer implements InvoiceSupport.Bean {
    static final String CONSUMER = "invoice-event-consumer";
    private Session session;

    public static void main(String[] args) throws Exception {
        try (java.sql.Connection db = InvoiceSupport.db()) {
            // Two instances starting at once: CREATE TABLE IF NOT EXISTS alone can fail on PostgreSQL.
            db.createStatement().execute("SELECT pg_advisory_xact_lock(hashtext('INBOX_EVENT_PROCESSING'))");
            db.createStatement().execute("CREATE TABLE IF NOT EXISTS INBOX_EVENT_PROCESSING ("
                    + "EVENT_ID VARCHAR(120) NOT NULL, CONSUMER_NAME VARCHAR(80) NOT NULL, STATUS VARCHAR(20) NOT NULL,"
                    + " CORRELATION_ID VARCHAR(120), REASON_CODE VARCHAR(80), PROCESSED_AT TIMESTAMP,"
                    + " CREATED_AT TIMESTAMP DEFAULT now() NOT NULL, PRIMARY KEY (EVENT_ID, CONSUMER_NAME))");
            db.commit();
        }
        InvoiceSupport.run(new InvoiceEventConsumer());
    }

    @Override
    public void init(Session session) {
        this.session = session;
    }

    @Override
    public void onMessage(Message message) {
        java.sql.Connection db = null;
        String eventId = null, correlationId = null;
        try {
            eventId = message.getStringProperty("eventId");
            correlationId = message.getStringProperty("correlationId");
            db = InvoiceSupport.db();
            if (alreadyProcessed(db, eventId)) {
                InvoiceSupport.log("event " + eventId + " already processed, skipping");
                db.commit();
                session.commit();
                return;
            }
            String body = ((TextMessage) message).getText();
            InvoiceSupport.InvoiceEvent ev;
            InvoiceSupport.Customer c;
            try {
                ev = InvoiceSupport.parse(body);
                c = InvoiceSupport.customer(db, ev.customerNo);
                InvoiceSupport.checkRules(ev);
            } catch (InvoiceSupport.BusinessException be) {
                mark(db, eventId, correlationId, "REJECTED", be.code);
                db.commit();
                session.commit();
                return;
            }
            InvoiceSupport.Letter letter = InvoiceSupport.letter(ev, c, eventId);
            InvoiceSupport.sendLetter(letter, null);
            Timestamp now = new Timestamp(System.currentTimeMillis());
            InvoiceSupport.insertLetter(db, letter, now);
            InvoiceSupport.archive(db, ev.invoiceNo, body, now);
            mark(db, eventId, correlationId, "PROCESSED", null);
            db.commit();
            session.commit();
        } catch (Exception e) {
            InvoiceSupport.log("technical failure, rolling back: " + e);
            if (db != null) {
                try {
                    markTechnicalFailure(db, eventId, correlationId); // same transaction as the work...
                } catch (SQLException me) {
                    InvoiceSupport.log("markTechnicalFailure failed: " + me);
                }
                try {
                    db.rollback(); // ...so the mark is rolled back with it
                } catch (SQLException re) {
                    InvoiceSupport.log("rollback failed: " + re);
                }
            }
            try {
                session.rollback();
            } catch (JMSException re) {
                InvoiceSupport.log("session rollback failed: " + re);
            }
        } finally {
            if (db != null) {
                try { db.close(); } catch (SQLException e) { /* closing */ }
            }
        }
    }

    private boolean alreadyProcessed(java.sql.Connection db, String eventId) throws SQLException {
        try (PreparedStatement ps = db.prepareStatement("SELECT COUNT(*) FROM INBOX_EVENT_PROCESSING WHERE EVENT_ID = ? AND CONSUMER_NAME = ? AND STATUS IN ('PROCESSED', 'REJECTED')")) {
            ps.setString(1, eventId);
            ps.setString(2, CONSUMER);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                return rs.getInt(1) > 0;
            }
        }
    }

    /** markProcessed / markRejected: a plain INSERT (the primary key refuses a second row). */
    private void mark(java.sql.Connection db, String eventId, String correlationId, String status, String reason) throws SQLException {
        upsert(db, eventId, correlationId, status, reason, "");
    }

    private void upsert(java.sql.Connection db, String eventId, String correlationId, String status, String reason, String onConflict) throws SQLException {
        try (PreparedStatement ps = db.prepareStatement("INSERT INTO INBOX_EVENT_PROCESSING (EVENT_ID, CONSUMER_NAME, STATUS, CORRELATION_ID, REASON_CODE, PROCESSED_AT) VALUES (?, ?, ?, ?, ?, now())" + onConflict)) {
            ps.setString(1, eventId);
            ps.setString(2, CONSUMER);
            ps.setString(3, status);
            ps.setString(4, correlationId);
            ps.setString(5, reason);
            ps.executeUpdate();
        }
    }

    private void markTechnicalFailure(java.sql.Connection db, String eventId, String correlationId) throws SQLException {
        upsert(db, eventId, correlationId, "TECHNICAL_FAILURE", null,
                " ON CONFLICT (EVENT_ID, CONSUMER_NAME) DO UPDATE SET STATUS = EXCLUDED.STATUS");
    }
}
