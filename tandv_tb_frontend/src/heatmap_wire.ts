/** The heatmap route's matrix decoded: base64 of little-endian floats and a missing mask. */

import { ApiError } from "./http";

/** The heatmap's ``values`` on the wire: base64 of little-endian floats (http_api.md). */
export interface WireMatrix {
  dtype: "float32" | "float64";
  shape: [number, number];
  data: string;
  /** base64 of one bit per cell (little bit order), 1 = no data; null when none is missing. */
  missing: string | null;
}

function base64Bytes(text: string): Uint8Array {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** The cells of a ``WireMatrix`` as float64 values (NaN where missing) and a missing mask. */
export function decodeMatrix(matrix: WireMatrix): { values: Float64Array; missing: Uint8Array } {
  const [rows, cols] = matrix.shape;
  const n = rows * cols;
  const width = matrix.dtype === "float64" ? 8 : 4;
  const bytes = base64Bytes(matrix.data);
  if (bytes.length !== n * width) {
    throw new ApiError(`heatmap: ${bytes.length} bytes for ${rows} x ${cols} cells`, 200);
  }
  let values: Float64Array;
  if (LITTLE_ENDIAN) {
    values =
      width === 8
        ? new Float64Array(bytes.buffer)
        : Float64Array.from(new Float32Array(bytes.buffer));
  } else {
    const view = new DataView(bytes.buffer);
    values = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      values[i] = width === 8 ? view.getFloat64(8 * i, true) : view.getFloat32(4 * i, true);
    }
  }
  const missing = new Uint8Array(n);
  if (matrix.missing !== null) {
    const bits = base64Bytes(matrix.missing);
    for (let i = 0; i < n; i++) {
      if ((bits[i >> 3] >> (i & 7)) & 1) {
        missing[i] = 1;
        values[i] = NaN;
      }
    }
  }
  return { values, missing };
}
