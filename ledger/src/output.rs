//! Query results as text: an aligned table for people, CSV and JSON for programs.

use arrow::record_batch::RecordBatch;

use crate::error::Result;

/// Output formats of `gpuledger query`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    Table,
    Csv,
    Json,
}

/// Writes `batches` in `format` to a string.
pub fn format_batches(batches: &[RecordBatch], format: OutputFormat) -> Result<String> {
    match format {
        OutputFormat::Table => Ok(format!("{}\n", arrow::util::pretty::pretty_format_batches(batches)?)),
        OutputFormat::Csv => {
            let mut buf = Vec::new();
            {
                let mut w = arrow::csv::WriterBuilder::new().with_header(true).build(&mut buf);
                for b in batches {
                    w.write(b)?;
                }
            }
            if batches.is_empty() {
                return Ok(String::new());
            }
            Ok(String::from_utf8_lossy(&buf).into_owned())
        }
        OutputFormat::Json => {
            let mut buf = Vec::new();
            {
                let mut w = arrow::json::ArrayWriter::new(&mut buf);
                let refs: Vec<&RecordBatch> = batches.iter().collect();
                w.write_batches(&refs)?;
                w.finish()?;
            }
            let mut s = String::from_utf8_lossy(&buf).into_owned();
            if s.is_empty() {
                s.push_str("[]");
            }
            s.push('\n');
            Ok(s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("team", DataType::Utf8, false), Field::new("n", DataType::Int64, true)]));
        RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(vec!["a", "b,c"])), Arc::new(Int64Array::from(vec![Some(1), None]))]).unwrap()
    }

    #[test]
    fn csv_quotes_and_json_keeps_nulls_out() {
        assert_eq!(format_batches(&[batch()], OutputFormat::Csv).unwrap(), "team,n\na,1\n\"b,c\",\n");
        assert_eq!(format_batches(&[batch()], OutputFormat::Json).unwrap(), "[{\"team\":\"a\",\"n\":1},{\"team\":\"b,c\"}]\n");
        assert!(format_batches(&[batch()], OutputFormat::Table).unwrap().contains("| b,c  |"));
        // No rows: the header alone, an empty array.
        let empty = RecordBatch::new_empty(batch().schema());
        assert_eq!(format_batches(std::slice::from_ref(&empty), OutputFormat::Csv).unwrap(), "team,n\n");
        assert_eq!(format_batches(&[empty], OutputFormat::Json).unwrap(), "[]\n");
    }
}
