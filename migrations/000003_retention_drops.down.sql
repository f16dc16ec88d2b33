DROP TABLE IF EXISTS retention_drops;
