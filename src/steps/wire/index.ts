/** Shared wire transforms of the built-in steps. Steps import these, never each other. */
export * from './format';
export * from './json';
export * from './single-token';
export * from './features';
export * from './transfer-params';
export * from './token-ids';
export * from './generate-input';
export * from './render-response';
export * from './headers';
export * from './image-uuids';
export * from './prefill-body';
export * from './responses-input';
export * from './responses-chat';
