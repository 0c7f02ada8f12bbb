-- Invoice business tables for MariaDB 10.6+ / MySQL 8. Applied by invoice.Migrate; idempotent.
-- DATETIME(6) columns hold UTC.
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
    created_at  DATETIME(6)  NOT NULL,
    INDEX shipping_letters_invoice (invoice_no)
);
CREATE TABLE IF NOT EXISTS archived_documents (
    document_id VARCHAR(64)  NOT NULL PRIMARY KEY,
    invoice_no  VARCHAR(40)  NOT NULL,
    payload     MEDIUMTEXT   NOT NULL,
    created_at  DATETIME(6)  NOT NULL,
    INDEX archived_documents_invoice (invoice_no)
);
