-- Invoice business tables for SQLite. Applied by invoice.Migrate; idempotent.
-- Timestamps are UTC text 'YYYY-MM-DD HH:MM:SS.ffffff', like the inbox table.
CREATE TABLE IF NOT EXISTS invoice_customers (
    customer_no VARCHAR(40)  NOT NULL PRIMARY KEY,
    name        VARCHAR(200) NOT NULL,
    address     VARCHAR(400) NOT NULL
);
CREATE TABLE IF NOT EXISTS shipping_letters (
    letter_id   VARCHAR(64)  NOT NULL PRIMARY KEY,
    invoice_no  VARCHAR(40)  NOT NULL,
    customer_no VARCHAR(40)  NOT NULL,
    event_id    VARCHAR(120),
    created_at  TIMESTAMP    NOT NULL
);
CREATE INDEX IF NOT EXISTS shipping_letters_invoice ON shipping_letters (invoice_no);
CREATE TABLE IF NOT EXISTS archived_documents (
    document_id VARCHAR(64)  NOT NULL PRIMARY KEY,
    invoice_no  VARCHAR(40)  NOT NULL,
    payload     TEXT         NOT NULL,
    created_at  TIMESTAMP    NOT NULL
);
CREATE INDEX IF NOT EXISTS archived_documents_invoice ON archived_documents (invoice_no);
