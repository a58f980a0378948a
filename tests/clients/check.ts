// Compiled by `tsc --strict` against the types openapi-typescript makes of the served document
// (herald.d.ts; the test copies this file beside it in build/clients/<engine>/): the answers a client
// reads are typed, not `unknown`.
import type { components, operations } from "./herald";

type Json<T> = T extends { content: { "application/json": infer Body } } ? Body : never;

type Created = Json<operations["createCampaign"]["responses"][201]>;
type Campaign = Json<operations["getCampaign"]["responses"][200]>["data"];
type Offers = Json<operations["listOffers"]["responses"][200]>;

export function draftId(answer: Created): string {
  return answer.data.id;
}

export function channelOf(campaign: Campaign): "PUSH" | "EMAIL" | components["schemas"]["OtherChannelCampaignView"]["channel"] {
  return campaign.channel;
}

export function emailCampaignName(campaign: Campaign): string | null | undefined {
  return campaign.channel === "EMAIL" ? campaign.basic_details?.name : undefined;
}

export function nextCursor(page: Offers): string | null {
  return page.pagination.next_cursor;
}

export function gatewayCode(body: components["schemas"]["GatewayError"]): string {
  return body.code;
}
