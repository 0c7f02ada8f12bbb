import java.sql.Timestamp;

import javax.jms.JMSException;
import javax.jms.Message;
import javax.jms.Session;
import javax.jms.TextMessage;

/**
 * The legacy invoice bean, as it runs in production: a JMS MessageListener on a
 * transacted session (the container's "Required" transaction), warts included.
 *
 * <ul>
 * <li>No idempotency: a redelivered or resent event creates a second letter, a second
 *     archived document and a second letter sent.</li>
 * <li>The letter service is called first, before the database writes; a crash or a
 *     failed commit after the call sends the letter again on redelivery.</li>
 * <li>The shipping letter and the archive are written after the call and committed
 *     together with the JMS session.</li>
 * <li>Every exception rolls the session back, business errors (unknown customer,
 *     invalid amount) and undecodable messages too: ActiveMQ's RedeliveryPolicy
 *     redelivers until maximumRedeliveries, then the broker moves the message to
 *     DLQ.&lt;queue&gt; without a reason of ours.</li>
 * </ul>
 */
public class LegacyInvoiceEventMdb implements InvoiceSupport.Bean {
    private Session session;

    public static void main(String[] args) throws Exception {
        InvoiceSupport.run(new LegacyInvoiceEventMdb());
    }

    @Override
    public void init(Session session) {
        this.session = session;
    }

    @Override
    public void onMessage(Message message) {
        try {
            handle(message);
            session.commit();
        } catch (Exception e) {
            // The container: throw new EJBException(e) -> the transaction rolls back, the broker redelivers.
            InvoiceSupport.log("onMessage failed, rolling back: " + e);
            try {
                session.rollback();
            } catch (JMSException re) {
                InvoiceSupport.log("rollback failed: " + re);
            }
        }
    }

    private void handle(Message message) throws Exception {
        String body = ((TextMessage) message).getText();
        String eventId = message.getStringProperty("eventId");
        InvoiceSupport.InvoiceEvent ev = InvoiceSupport.parse(body);
        try (java.sql.Connection db = InvoiceSupport.db()) {
            InvoiceSupport.Customer c = InvoiceSupport.customer(db, ev.customerNo);
            InvoiceSupport.checkRules(ev);
            InvoiceSupport.Letter letter = InvoiceSupport.letter(ev, c, eventId);
            // letterClient.send(letter): first, and without idempotency key.
            InvoiceSupport.sendLetter(letter, null);
            Timestamp now = new Timestamp(System.currentTimeMillis());
            InvoiceSupport.insertLetter(db, letter, now);
            InvoiceSupport.archive(db, ev.invoiceNo, body, now);
            db.commit();
        }
    }
}
