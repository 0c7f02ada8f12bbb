-- Invoice business tables for Oracle 12c+. Applied by invoice.Migrate; idempotent: each block
-- ignores ORA-00955 (name already used). Blocks are separated by lines holding only "/".
-- Not tested against a live Oracle server (none is available to the project's CI).
BEGIN
  EXECUTE IMMEDIATE 'CREATE TABLE invoice_customers (
    customer_no VARCHAR2(40)  NOT NULL PRIMARY KEY,
    name        VARCHAR2(200) NOT NULL,
    address     VARCHAR2(400) NOT NULL
  )';
EXCEPTION WHEN OTHERS THEN IF SQLCODE != -955 THEN RAISE; END IF;
END;
/
BEGIN
  EXECUTE IMMEDIATE 'CREATE TABLE shipping_letters (
    letter_id   VARCHAR2(64)  NOT NULL PRIMARY KEY,
    invoice_no  VARCHAR2(40)  NOT NULL,
    customer_no VARCHAR2(40)  NOT NULL,
    event_id    VARCHAR2(120),
    created_at  TIMESTAMP     NOT NULL
  )';
EXCEPTION WHEN OTHERS THEN IF SQLCODE != -955 THEN RAISE; END IF;
END;
/
BEGIN
  EXECUTE IMMEDIATE 'CREATE INDEX shipping_letters_invoice ON shipping_letters (invoice_no)';
EXCEPTION WHEN OTHERS THEN IF SQLCODE != -955 THEN RAISE; END IF;
END;
/
BEGIN
  EXECUTE IMMEDIATE 'CREATE TABLE archived_documents (
    document_id VARCHAR2(64)  NOT NULL PRIMARY KEY,
    invoice_no  VARCHAR2(40)  NOT NULL,
    payload     CLOB          NOT NULL,
    created_at  TIMESTAMP     NOT NULL
  )';
EXCEPTION WHEN OTHERS THEN IF SQLCODE != -955 THEN RAISE; END IF;
END;
/
BEGIN
  EXECUTE IMMEDIATE 'CREATE INDEX archived_documents_invoice ON archived_documents (invoice_no)';
EXCEPTION WHEN OTHERS THEN IF SQLCODE != -955 THEN RAISE; END IF;
END;
/
